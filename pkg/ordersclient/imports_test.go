package ordersclient_test

import (
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestImportsOnlyTheRuntime keeps the package a public contract that
// outside teams can take alone: its files import the standard library and
// oapi-codegen's runtime, never the services or internal/.
func TestImportsOnlyTheRuntime(t *testing.T) {
	t.Parallel()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			std := !strings.Contains(strings.SplitN(path, "/", 2)[0], ".")
			if !std && path != "github.com/oapi-codegen/runtime" {
				t.Errorf("%s imports %s: only the standard library and github.com/oapi-codegen/runtime are allowed", name, path)
			}
		}
	}
}
