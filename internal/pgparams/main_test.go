package pgparams

import (
	"testing"

	"github.com/ordertimeout/ordertimeout/internal/testinfra"
)

// TestMain removes the shared Postgres container of the tests.
func TestMain(m *testing.M) { testinfra.Main(m) }
