package tenants_test

import (
	"cmp"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/tenants"
)

var orders = tenants.Tenant{Name: "orders", FirePrefixes: []string{"orders.cancel."}}

func TestCheck(t *testing.T) {
	t.Parallel()
	res := tenants.Tenant{Name: "res", FirePrefixes: []string{"res.expire."}, PasswordEnv: "NATS_RES_PASSWORD"}
	with := func(f func(*tenants.Tenant)) tenants.Tenant { r := res; f(&r); return r }
	tests := []struct {
		name string
		ts   []tenants.Tenant
		want string // in the error; "" for none
	}{
		{"shipped", []tenants.Tenant{orders, res}, ""},
		{"no orders", []tenants.Tenant{res}, "orders tenant"},
		{"twice", []tenants.Tenant{orders, res, res}, "twice"},
		{"bad name", []tenants.Tenant{orders, with(func(r *tenants.Tenant) { r.Name = "Res" })}, "name"},
		{"service's name", []tenants.Tenant{orders, with(func(r *tenants.Tenant) { r.Name = "timeoutd" })}, "service"},
		{"no prefix", []tenants.Tenant{orders, with(func(r *tenants.Tenant) { r.FirePrefixes = nil })}, "fire_prefixes"},
		{"prefix without dot", []tenants.Tenant{orders, with(func(r *tenants.Tenant) { r.FirePrefixes = []string{"res.expire"} })}, "followed by '.'"},
		{"wildcard", []tenants.Tenant{orders, with(func(r *tenants.Tenant) { r.FirePrefixes = []string{"res.*."} })}, "followed by '.'"},
		{"command subjects", []tenants.Tenant{orders, with(func(r *tenants.Tenant) { r.FirePrefixes = []string{"timeouts.cmd."} })}, "platform's own"},
		{"overlaps orders'", []tenants.Tenant{orders, with(func(r *tenants.Tenant) { r.FirePrefixes = []string{"orders."} })}, "overlaps"},
		{"no password", []tenants.Tenant{orders, with(func(r *tenants.Tenant) { r.PasswordEnv = "" })}, "password"},
		{"two passwords", []tenants.Tenant{orders, with(func(r *tenants.Tenant) { r.PasswordBcrypt = "$2a$11$x" })}, "password"},
		{"bad hash", []tenants.Tenant{orders, with(func(r *tenants.Tenant) { r.PasswordEnv, r.PasswordBcrypt = "", `$2a$11$x", x: "` })}, "bcrypt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tenants.Check(tt.ts)
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("Check = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestShippedRegistryParses(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../deploy/compose/tenants.json")
	if err != nil {
		t.Fatal(err)
	}
	ts, err := tenants.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(tenants.Marshal(ts)); got != string(data) {
		t.Errorf("deploy/compose/tenants.json is not in Marshal's form (scripts/tenant.sh add rewrites it so):\n%s", got)
	}
	if _, err := tenants.Parse([]byte(`{"tenants": [{"name": "orders", "fire_prefix": ["orders.cancel."]}]}`)); err == nil {
		t.Error("a misspelt member was accepted")
	}
}

// TestRegistryReloads: a tenant added to the file is known after the
// next reload; a change that does not check is ignored.
func TestRegistryReloads(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tenants.json")
	write := func(ts []tenants.Tenant) {
		t.Helper()
		if err := os.WriteFile(path, tenants.Marshal(ts), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write([]tenants.Tenant{orders})
	r, err := tenants.Open(path, 5*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if _, ok := r.FirePrefixes("inv"); ok {
		t.Fatal("inv known before it was added")
	}
	write([]tenants.Tenant{orders, {Name: "inv", FirePrefixes: []string{"inv.due."}, PasswordBcrypt: "$2a$11$h"}})
	poll(t, func() bool { p, ok := r.FirePrefixes("inv"); return ok && slices.Equal(p, []string{"inv.due."}) })
	if err := os.WriteFile(path, []byte(`{"tenants": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	write([]tenants.Tenant{orders, {Name: "inv", FirePrefixes: []string{"orders.cancel."}, PasswordBcrypt: "$2a$11$h"}}) // overlaps: refused
	deadline := time.Now().Add(100 * time.Millisecond)
	for time.Now().Before(deadline) {
		if p, ok := r.FirePrefixes("inv"); !ok || !slices.Equal(p, []string{"inv.due."}) {
			t.Fatalf("an invalid registry replaced the valid one: inv = %v, %v", p, ok)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func poll(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRemoveAndSetFirePrefixes: a tenant leaves the registry, or gets
// other prefixes, checked as a whole (no prefix of another's); the orders
// tenant, the platform's own, and unknown tenants are refused.
func TestRemoveAndSetFirePrefixes(t *testing.T) {
	t.Parallel()
	ts := []tenants.Tenant{
		{Name: "orders", FirePrefixes: []string{"orders.cancel."}},
		{Name: "res", FirePrefixes: []string{"res.expire."}, PasswordEnv: "RES_PW"},
		{Name: "inv", FirePrefixes: []string{"inv.due."}, PasswordEnv: "INV_PW"},
	}
	if got, err := tenants.Remove(ts, "res"); err != nil || len(got) != 2 || got[1].Name != "inv" || len(ts) != 3 {
		t.Fatalf("Remove(res) = %+v, %v; want orders and inv, ts unchanged", got, err)
	}
	got, err := tenants.SetFirePrefixes(ts, "res", []string{"res.due.", "res.late."})
	if err != nil || !slices.Equal(got[1].FirePrefixes, []string{"res.due.", "res.late."}) || ts[1].FirePrefixes[0] != "res.expire." {
		t.Fatalf("SetFirePrefixes(res) = %+v, %v", got, err)
	}
	for _, tt := range []struct {
		name string
		err  error
		do   func() error
	}{
		{"remove orders", tenants.ErrPlatform, func() error { _, err := tenants.Remove(ts, "orders"); return err }},
		{"remove an unknown tenant", tenants.ErrUnknown, func() error { _, err := tenants.Remove(ts, "ghost"); return err }},
		{"re-prefix an unknown tenant", tenants.ErrUnknown, func() error { _, err := tenants.SetFirePrefixes(ts, "ghost", []string{"g."}); return err }},
		{"re-prefix into another's prefix", nil, func() error { _, err := tenants.SetFirePrefixes(ts, "res", []string{"inv.due.x."}); return err }},
	} {
		err := tt.do()
		if err == nil || tt.err != nil && !errors.Is(err, tt.err) {
			t.Errorf("%s: %v, want %v", tt.name, err, cmp.Or[error](tt.err, errors.New("a check's error")))
		}
	}
}
