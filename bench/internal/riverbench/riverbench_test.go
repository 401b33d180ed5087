package riverbench

import (
	"testing"
	"time"
)

func TestParseStorm(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    Storm
		wantErr bool
	}{
		{"available minimums", "available:1ms/1ms", Storm{Mode: ModeAvailable, FetchCooldown: time.Millisecond, FetchPollInterval: time.Millisecond}, false},
		{"scheduled tuned", "scheduled:10ms/50ms", Storm{Mode: ModeScheduled, FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond}, false},
		{"unknown mode", "eager:1ms/1ms", Storm{}, true},
		{"no fetch settings", "available", Storm{}, true},
		{"bad duration", "available:1ms/soon", Storm{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseStorm(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseStorm(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("ParseStorm(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}
