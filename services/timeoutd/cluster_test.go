package timeoutd

import (
	"slices"
	"testing"
)

func TestAppendPartitions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		parts, add []int
		want       []int
	}{
		{"nothing to add", []int{3}, nil, []int{3}},
		{"into none", nil, []int{5, 1, 5}, []int{5, 1}},
		{"only the new ones, in order first seen", []int{2, 7}, []int{7, 9, 2, 4, 9}, []int{2, 7, 9, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := appendPartitions(tt.parts, tt.add...); !slices.Equal(got, tt.want) {
				t.Fatalf("appendPartitions(%v, %v) = %v, want %v", tt.parts, tt.add, got, tt.want)
			}
		})
	}
}
