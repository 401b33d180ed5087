// Package tenants reads, checks and writes the platform's tenant registry,
// the one source of what a tenant is allowed: a JSON file
// (deploy/compose/tenants.json) that lists each tenant's name (its key
// namespace, its command subject token and its NATS user) and its fire
// subject prefixes. deploy/natsconf renders each tenant's NATS user and
// permissions from it, the streams bootstrap makes the expiry stream
// capture its fire subjects, and timeoutd accepts a tenant's commands and
// fires its deadlines by it, reloading the file when it changes
// (Registry).
//
//	{"tenants": [
//	  {"name": "orders", "fire_prefixes": ["orders.cancel."]},
//	  {"name": "reservations", "fire_prefixes": ["reservations.expire."], "password_env": "NATS_RESERVATIONS_PASSWORD"}
//	]}
package tenants

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// Tenant is one producer of deadlines.
type Tenant struct {
	// Name is the tenant's name (events.ValidTenant): the namespace of its
	// keys (events.TenantKey), the token of its command subjects and the
	// name of its NATS user, durable consumers and dead letters.
	Name string `json:"name"`
	// FirePrefixes are the prefixes of the subjects its deadlines may fire
	// on, each a literal subject followed by '.'; no prefix of one tenant
	// starts another tenant's.
	FirePrefixes []string `json:"fire_prefixes"`
	// PasswordEnv names the NATS server's environment variable that holds
	// the password of the tenant's NATS user (a tenant of the shipped
	// configuration). A tenant other than orders has it or PasswordBcrypt.
	PasswordEnv string `json:"password_env,omitempty"`
	// PasswordBcrypt is the bcrypt hash of that password (a tenant added
	// on a running platform, whose server's environment cannot change).
	PasswordBcrypt string `json:"password_bcrypt,omitempty"`
}

// file is the registry's JSON form.
type file struct {
	Tenants []Tenant `json:"tenants"`
}

// reservedNames are the NATS users of the platform's services, which no
// tenant may take.
var reservedNames = []string{"bootstrap", "timeoutd", "observer", "route"}

// reservedRoots are subject roots no tenant's deadline may fire on: the
// platform's commands, missed events and dead letters, the order events,
// and the server's own.
var reservedRoots = []string{"timeouts.", "dlq.", "orders.created.", "orders.paid.", "orders.cancelled.", "$", "_INBOX"}

// Check reports the first problem of ts as an error naming the tenant and
// the field: an invalid or duplicate name, a reserved name, an invalid
// prefix or one that overlaps another tenant's, a tenant without
// password or with two. The orders tenant is the orders service, whose
// NATS user the configuration template declares: it must be there, and
// without password.
func Check(ts []Tenant) error {
	seen := map[string]bool{}
	for _, t := range ts {
		if err := checkOne(t); err != nil {
			return err
		}
		if seen[t.Name] {
			return fmt.Errorf("tenants: %s: listed twice", t.Name)
		}
		seen[t.Name] = true
	}
	if !seen[events.OrdersTenant] {
		return fmt.Errorf("tenants: the %s tenant (the orders service) is missing", events.OrdersTenant)
	}
	for i, a := range ts {
		for _, b := range ts[i+1:] {
			for _, p := range a.FirePrefixes {
				for _, q := range b.FirePrefixes {
					if strings.HasPrefix(p, q) || strings.HasPrefix(q, p) {
						return fmt.Errorf("tenants: %s: fire prefix %q overlaps %q of tenant %s", b.Name, q, p, a.Name)
					}
				}
			}
		}
	}
	return nil
}

func checkOne(t Tenant) error {
	if !events.ValidTenant(t.Name) {
		return fmt.Errorf("tenants: name %q: must be 1 to %d lower-case letters, digits or '_', starting with a letter", t.Name, events.MaxTenantLen)
	}
	if slices.Contains(reservedNames, t.Name) {
		return fmt.Errorf("tenants: name %q: is a service's NATS user", t.Name)
	}
	if len(t.FirePrefixes) == 0 {
		return fmt.Errorf("tenants: %s: fire_prefixes: at least one is needed", t.Name)
	}
	for _, p := range t.FirePrefixes {
		if err := CheckPrefix(p); err != nil {
			return fmt.Errorf("tenants: %s: fire_prefixes: %w", t.Name, err)
		}
	}
	switch {
	case t.Name == events.OrdersTenant && (t.PasswordEnv != "" || t.PasswordBcrypt != ""):
		return fmt.Errorf("tenants: %s: the orders service's NATS user is declared by the configuration template: no password here", t.Name)
	case t.Name != events.OrdersTenant && (t.PasswordEnv == "") == (t.PasswordBcrypt == ""):
		return fmt.Errorf("tenants: %s: needs one of password_env and password_bcrypt", t.Name)
	case t.PasswordEnv != "" && !validEnv(t.PasswordEnv):
		return fmt.Errorf("tenants: %s: password_env %q: must be upper-case letters, digits and '_'", t.Name, t.PasswordEnv)
	case t.PasswordBcrypt != "" && !strings.HasPrefix(t.PasswordBcrypt, "$2"):
		return fmt.Errorf("tenants: %s: password_bcrypt: not a bcrypt hash", t.Name)
	case strings.ContainsAny(t.PasswordBcrypt, "\"\\ \n"):
		return fmt.Errorf("tenants: %s: password_bcrypt: not a bcrypt hash", t.Name)
	}
	return nil
}

// CheckPrefix reports whether p is a valid fire subject prefix: a literal
// NATS subject followed by '.', under none of the platform's own roots.
func CheckPrefix(p string) error {
	if !strings.HasSuffix(p, ".") || !events.ValidSubject(strings.TrimSuffix(p, ".")) {
		return fmt.Errorf("%q must be a literal subject followed by '.'", p)
	}
	for _, r := range reservedRoots {
		if strings.HasPrefix(p, r) || strings.HasPrefix(r, p) {
			return fmt.Errorf("%q overlaps the platform's own subjects %s…", p, r)
		}
	}
	return nil
}

func validEnv(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return s != ""
}

// Parse decodes and checks a registry; unknown members are an error, so
// that a misspelt one is not silently ignored.
func Parse(data []byte) ([]Tenant, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f file
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("tenants: %w", err)
	}
	if err := Check(f.Tenants); err != nil {
		return nil, err
	}
	return f.Tenants, nil
}

// Load reads and parses the registry at path.
func Load(path string) ([]Tenant, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tenants: %w", err)
	}
	ts, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ts, nil
}

// Marshal returns the registry's JSON form, one tenant a line.
func Marshal(ts []Tenant) []byte {
	var b bytes.Buffer
	b.WriteString("{\"tenants\": [\n")
	for i, t := range ts {
		line, _ := json.Marshal(t) // cannot fail: strings only
		b.WriteString("  ")
		b.Write(line)
		if i < len(ts)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("]}\n")
	return b.Bytes()
}

// ErrExists is returned by Add for a tenant already in the registry.
var ErrExists = errors.New("tenants: the tenant exists")

// Add returns ts with t appended, checked as a whole.
func Add(ts []Tenant, t Tenant) ([]Tenant, error) {
	if slices.ContainsFunc(ts, func(o Tenant) bool { return o.Name == t.Name }) {
		return nil, fmt.Errorf("%w: %s", ErrExists, t.Name)
	}
	out := append(slices.Clone(ts), t)
	if err := Check(out); err != nil {
		return nil, err
	}
	return out, nil
}

// ErrUnknown is returned by Remove and SetFirePrefixes for a tenant not
// in the registry, and ErrPlatform for the orders tenant, which the
// platform's own orders service is.
var (
	ErrUnknown  = errors.New("tenants: no such tenant")
	ErrPlatform = errors.New("tenants: the orders tenant is the platform's own")
)

// Remove returns ts without the tenant name. Its deadlines still pending
// in timeoutd fire no more: each ends at its deadline as a missed event
// with the reason unknown_tenant (timeoutd's fire path checks the
// registry again then), and its commands still in the streams are
// dead-lettered unknown_tenant.
func Remove(ts []Tenant, name string) ([]Tenant, error) {
	i, err := index(ts, name)
	if err != nil {
		return nil, err
	}
	return slices.Delete(slices.Clone(ts), i, i+1), nil
}

// SetFirePrefixes returns ts with the tenant name's fire subject prefixes
// replaced by prefixes, checked as a whole. Its pending deadlines whose
// fire subject is under none of the new prefixes end at their deadline as
// missed events with the reason subject_not_allowed.
func SetFirePrefixes(ts []Tenant, name string, prefixes []string) ([]Tenant, error) {
	i, err := index(ts, name)
	if err != nil {
		return nil, err
	}
	out := slices.Clone(ts)
	out[i].FirePrefixes = slices.Clone(prefixes)
	if err := Check(out); err != nil {
		return nil, err
	}
	return out, nil
}

// index returns the position of the tenant name in ts, other than the
// orders tenant's.
func index(ts []Tenant, name string) (int, error) {
	if name == events.OrdersTenant {
		return 0, ErrPlatform
	}
	i := slices.IndexFunc(ts, func(t Tenant) bool { return t.Name == name })
	if i < 0 {
		return 0, fmt.Errorf("%w: %s", ErrUnknown, name)
	}
	return i, nil
}

// FirePrefixes returns every tenant's fire subject prefixes, in order.
func FirePrefixes(ts []Tenant) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.FirePrefixes...)
	}
	return out
}
