package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestREADMEFiguresAreCurrent fails while the README's figures differ from
// the docs' tables, or while those break the README table's bounds: run
// `make figures`.
func TestREADMEFiguresAreCurrent(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := render(root, readme)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readme, want) {
		t.Fatal("README.md's figures differ from docs/BENCHMARKS.md's and docs/RELIABILITY.md's first tables: run make figures")
	}
}

func TestRender(t *testing.T) {
	t.Parallel()
	const head = "| what | us | peer | measured | command |\n|---|---|---|---|---|\n"
	storm := "| [storm](#storms) | 1 ms | 2 ms | 2026-11-26 | `go test -run 'A\\|B'` |\n"
	guarantee := "| [never early](journal/2026-11-23-soak.md) | 0 early | — | 2026-11-23 | `make soak` |\n"
	readme := "# P\n\n" + beginMarker + "\nold\n" + endMarker + "\n\n## Next\n"
	tests := []struct {
		name, figures, guarantees, readme string
		wantErr                           string // "": no error
	}{
		{name: "one table, links from the README, no command", figures: storm, guarantees: guarantee, readme: readme},
		{name: "no markers", figures: storm, guarantees: guarantee, readme: "# P\n", wantErr: "markers"},
		{name: "a row without a link", figures: "| storm | 1 ms | 2 ms | 2026-11-26 | x |\n", guarantees: guarantee, readme: readme,
			wantErr: "no link"},
		{name: "a link to no heading", figures: "| [storm](#nowhere) | 1 ms | 2 ms | 2026-11-26 | x |\n", guarantees: guarantee, readme: readme,
			wantErr: "no heading #nowhere"},
		{name: "a link to no file", figures: storm, guarantees: "| [x](journal/none.md) | 0 | — | d | c |\n", readme: readme,
			wantErr: "none.md"},
		{name: "a cell of a paragraph", figures: "| [storm](#storms) | " + strings.Repeat("1 ms, ", 11) + " | 2 ms | d | x |\n", guarantees: guarantee,
			readme: readme, wantErr: "at most 60"},
		{name: "too many rows", figures: strings.Repeat(storm, MaxRows), guarantees: guarantee, readme: readme,
			wantErr: fmt.Sprintf("at most %d", MaxRows)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			write := func(name, s string) {
				t.Helper()
				if err := os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, name), []byte(s), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			write("docs/BENCHMARKS.md", "# B\n\n## Current figures\n\ntext\n\n"+head+tt.figures+"\nlater\n| other | table |\n\n## Storms\n")
			write("docs/RELIABILITY.md", "# R\n\n## Current guarantees\n\n"+head+tt.guarantees)
			write("docs/journal/2026-11-23-soak.md", "# Soak\n")
			got, err := render(root, []byte(tt.readme))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := "# P\n\n" + beginMarker + "\n\n| what | us | peer | measured |\n|---|---|---|---|\n" +
				"| [storm](docs/BENCHMARKS.md#storms) | 1 ms | 2 ms | 2026-11-26 |\n" +
				"| [never early](docs/journal/2026-11-23-soak.md) | 0 early | — | 2026-11-23 |\n\n" + endMarker + "\n\n## Next\n"
			if string(got) != want {
				t.Fatalf("rendered:\n%s\nwant:\n%s", got, want)
			}
			again, err := render(root, got)
			if err != nil || !bytes.Equal(again, got) {
				t.Fatalf("render is not idempotent: %v\n%s", err, again)
			}
		})
	}
}
