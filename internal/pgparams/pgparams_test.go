package pgparams_test

import (
	"maps"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/pgparams"
)

func TestApply(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		t      pgparams.Timeouts
		params map[string]string
		want   map[string]string
	}{
		{"defaults", pgparams.Timeouts{}, map[string]string{},
			map[string]string{"statement_timeout": "30000ms", "idle_in_transaction_session_timeout": "60000ms"}},
		{"configured", pgparams.Timeouts{Statement: 5 * time.Second, IdleInTransaction: 1500 * time.Millisecond}, map[string]string{},
			map[string]string{"statement_timeout": "5000ms", "idle_in_transaction_session_timeout": "1500ms"}},
		{"the connection string wins", pgparams.Timeouts{Statement: 5 * time.Second}, map[string]string{"statement_timeout": "0"},
			map[string]string{"statement_timeout": "0", "idle_in_transaction_session_timeout": "60000ms"}},
		{"options win", pgparams.Timeouts{}, map[string]string{"options": "-c idle_in_transaction_session_timeout=1s"},
			map[string]string{"options": "-c idle_in_transaction_session_timeout=1s", "statement_timeout": "30000ms"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.t.Apply(tt.params)
			if !maps.Equal(tt.params, tt.want) {
				t.Fatalf("params = %v, want %v", tt.params, tt.want)
			}
		})
	}
}
