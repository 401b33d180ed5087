package harness

import (
	"slices"
	"testing"
)

func TestPGParameters(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		want    []string
		wantErr bool
	}{
		{"pairs", []string{"-c", "fsync=on", "-c", "shared_buffers=1GB"}, []string{"fsync=on", "shared_buffers=1GB"}, false},
		{"none", nil, nil, false},
		{"odd", []string{"-c"}, nil, true},
		{"not -c", []string{"-N", "300"}, nil, true},
		{"no value", []string{"-c", "fsync"}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := pgParameters(tt.args)
			if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
				t.Errorf("pgParameters(%q) = %q, %v; want %q, error %v", tt.args, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestPatroniMembers(t *testing.T) {
	t.Parallel()
	ms := PatroniMembers{
		{Name: "pg-2", Role: "sync_standby", State: "streaming", Timeline: 1},
		{Name: "pg-1", Role: "leader", State: "running", Timeline: 1},
		{Name: "pg-3", Role: "replica", State: "stopped", Timeline: 1},
	}
	if got, want := ms.String(), "pg-1:leader/running/tl1,pg-2:sync_standby/streaming/tl1,pg-3:replica/stopped/tl1"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	if got := ms.running("leader"); got != "pg-1" {
		t.Errorf("running(leader) = %q, want pg-1", got)
	}
	if got := ms.running("replica"); got != "" {
		t.Errorf("running(replica) = %q, want none: pg-3 is stopped", got)
	}
	if got := ms.role("pg-2"); got != "sync_standby" {
		t.Errorf("role(pg-2) = %q, want sync_standby", got)
	}
}
