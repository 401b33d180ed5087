package timeoutd

import (
	"fmt"
	"strings"

	"github.com/ordertimeout/ordertimeout/pkg/events"
)

// Tenants is timeoutd's view of the tenants (internal/tenants.Registry
// reads it from the registry file): which tenants it accepts commands
// from, and where each one's deadlines may fire. A command's tenant is
// the tenant token of its stored subject (tenantOfStored), which the
// tenant's NATS permissions bind: never the payload.
type Tenants interface {
	// FirePrefixes returns the fire subject prefixes of tenant, and false
	// for a tenant it does not know. It is called once per command
	// message; the slice must not be modified.
	FirePrefixes(tenant string) ([]string, bool)
}

// ordersOnly is the Tenants of a Config without any: the orders tenant
// alone, with the Config's FireSubjectPrefixes.
type ordersOnly []string

func (o ordersOnly) FirePrefixes(tenant string) ([]string, bool) {
	return o, tenant == events.OrdersTenant
}

// tenantOfStored returns the tenant whose command subject a stored
// command was published on: the tenant token of
// timeouts.cmd.<partition>.<tenant>.<key>, the orders tenant for
// timeouts.cmd.<partition>.<key> (its subjects, and every command stored
// before the platform had tenants), "" for a subject of neither form.
func tenantOfStored(subject string) string {
	rest, ok := strings.CutPrefix(subject, events.CommandSubjectPrefix)
	if !ok {
		return ""
	}
	switch tokens := strings.Split(rest, "."); len(tokens) {
	case 2:
		return events.OrdersTenant
	case 3:
		return tokens[1]
	default:
		return ""
	}
}

// checkTenant returns the fire subject prefixes of tenant, or the error
// that dead-letters its commands: an unknown tenant, or none (a subject
// that is not a stored command's, subject_mismatch).
func (in *ingester) checkTenant(tenant, subject string) ([]string, error) {
	if !events.ValidTenant(tenant) {
		// A subject of no tenant: an unmapped form, or a partition
		// subject published as it is, which the tenants' mapping files as
		// of a "tenant" that is a partition number.
		return nil, &events.Error{Reason: events.ReasonSubjectMismatch, Field: "key",
			Detail: fmt.Sprintf("subject %q is not timeouts.cmd.<partition>.<key> nor timeouts.cmd.<partition>.<tenant>.<key>", subject)}
	}
	if prefixes, ok := in.cfg.Tenants.FirePrefixes(tenant); ok {
		return prefixes, nil
	}
	return nil, &events.Error{Reason: events.ReasonUnknownTenant, Field: "",
		Detail: fmt.Sprintf("tenant %q of the command subject is not in timeoutd's tenant registry (TIMEOUTD_TENANTS_FILE)", tenant)}
}

// refusedFire returns why the timeout of key may not fire on subject now,
// "" when it may: its tenant is no longer in the registry
// (ReasonUnknownTenant), or subject is no longer under one of its
// prefixes (ReasonSubjectNotAllowed). The command was checked when it
// was stored; this checks again at the deadline, against the registry as
// it is then, so that a tenant removed or given other prefixes since, and
// a prefix handed to another tenant since, never has an old deadline
// fire into subjects that are no longer its own. Such a timeout ends as a
// missed event with the reason, on its tenant's missed subject.
func (c Config) refusedFire(key, subject string) events.Reason {
	tenant, _ := events.SplitKey(key)
	prefixes, ok := c.Tenants.FirePrefixes(tenant)
	if !ok {
		return events.ReasonUnknownTenant
	}
	for _, p := range prefixes {
		if strings.HasPrefix(subject, p) {
			return ""
		}
	}
	return events.ReasonSubjectNotAllowed
}

// checkKeyTenant returns the error that dead-letters a command of key
// published on tenant's subject: a key of another tenant (foreign_key).
func checkKeyTenant(key, tenant string) error {
	if t, _ := events.SplitKey(key); t != tenant {
		return &events.Error{Reason: events.ReasonForeignKey, Field: "key",
			Detail: fmt.Sprintf("key %q belongs to tenant %q, not to %q, whose command subject it came on", key, t, tenant)}
	}
	return nil
}
