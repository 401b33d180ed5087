package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestREADMEFiguresAreCurrent fails while the README's figures differ from
// the docs' tables: run `make figures`.
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
	write("docs/BENCHMARKS.md", "# B\n\n## Current figures\n\ntext\n\n| what | us | peer | target | met | command |\n|---|---|---|---|---|---|\n| storm | 1 ms | 2 ms | ≤ 5 | yes | `go test -run 'A\\|B'` |\n\nlater\n| other | table |\n")
	write("docs/RELIABILITY.md", "# R\n\n## Current guarantees\n\n| guarantee | result | command |\n|---|---|---|\n| never early | 0 early | `make soak` |\n")
	tests := []struct {
		name, readme, want string
		wantErr            bool
	}{
		{name: "replaced between the markers", readme: "# P\n\n" + beginMarker + "\nold\n" + endMarker + "\n\n## Next\n",
			want: "| storm | 1 ms | 2 ms | ≤ 5 | yes |\n"},
		{name: "no markers", readme: "# P\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := render(root, []byte(tt.readme))
			if tt.wantErr {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s := string(got)
			if !strings.Contains(s, tt.want) || !strings.Contains(s, "| never early | 0 early |\n") || strings.Contains(s, "old") ||
				strings.Contains(s, "other") || !strings.HasSuffix(s, endMarker+"\n\n## Next\n") {
				t.Fatalf("rendered:\n%s", s)
			}
			again, err := render(root, got)
			if err != nil || !bytes.Equal(again, got) {
				t.Fatalf("render is not idempotent: %v\n%s", err, again)
			}
		})
	}
}
