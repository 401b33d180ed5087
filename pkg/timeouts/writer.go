package timeouts

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/pkg/outbox"
)

// Writer writes deadline commands into an outbox table within the
// caller's transaction, so that a deadline is set if and only if the
// caller's own change commits. An outbox.Relay (with Pack) publishes them;
// call its Kick after the commit. The zero Writer is ready to use. A
// Writer only reads its fields, so one may be shared by goroutines.
type Writer struct {
	// Tenant is the producer's tenant, the name of its NATS user: the keys
	// given to Set and Clear are its own (local keys), written as
	// events.TenantKey(Tenant, key), and Write refuses a command of
	// another tenant's key (events.ReasonForeignKey). Empty is the orders
	// tenant, whose keys are unqualified.
	Tenant string
	// Table is the outbox table; default outbox.TableDefault.
	Table string
	// FireSubjectPrefixes, when set, are the fire subject prefixes the
	// platform accepts from the tenant (its fire_prefixes in the tenant
	// registry, deploy/compose/tenants.json): a set
	// whose fire subject is under none is refused here, with reason
	// events.ReasonSubjectNotAllowed, rather than dead-lettered by timeoutd.
	FireSubjectPrefixes []string
	// Now is the clock that dates the commands (their IssuedAt); default
	// time.Now.
	Now func() time.Time
}

// Set writes the command that creates, moves or extends the deadline of
// d.Key, a key of the Writer's tenant. It returns a *RefusedError, writing
// nothing, for a command the platform would refuse.
func (w Writer) Set(ctx context.Context, tx outbox.Execer, d Deadline) error {
	d.Key = events.TenantKey(w.tenant(), d.Key)
	c, err := SetCommand(d, w.now())
	if err != nil {
		return err
	}
	return w.Write(ctx, tx, c)
}

// Clear writes the command that removes the deadline of key, a key of the
// Writer's tenant, at version. It returns a *RefusedError, writing
// nothing, for an invalid key or version.
func (w Writer) Clear(ctx context.Context, tx outbox.Execer, key string, version int64) error {
	c, err := ClearCommand(events.TenantKey(w.tenant(), key), version, w.now())
	if err != nil {
		return err
	}
	return w.Write(ctx, tx, c)
}

// Write writes cmds, in order, in one statement, each with the trace
// context of ctx's span (outbox.TraceParent), which travels with the
// command to timeoutd. It returns a *RefusedError, writing none of them,
// when one would be refused.
func (w Writer) Write(ctx context.Context, tx outbox.Execer, cmds ...events.Command) error {
	msgs := make([]outbox.Message, len(cmds))
	tp := outbox.TraceParent(ctx)
	for i, c := range cmds {
		if t, _ := events.SplitKey(c.Key); t != w.tenant() {
			return &RefusedError{Reason: events.ReasonForeignKey, Field: "key",
				Detail: fmt.Sprintf("is tenant %s's, not this writer's %s", t, w.tenant()), Key: c.Key}
		}
		if err := allowed(c, w.FireSubjectPrefixes); err != nil {
			return err
		}
		m, err := Message(c)
		if err != nil {
			return err
		}
		m.TraceParent = tp
		msgs[i] = m
	}
	if err := outbox.Insert(ctx, tx, cmp.Or(w.Table, outbox.TableDefault), msgs); err != nil {
		return fmt.Errorf("timeouts: %w", err)
	}
	return nil
}

func (w Writer) tenant() string { return cmp.Or(w.Tenant, events.OrdersTenant) }

func (w Writer) now() time.Time {
	if w.Now == nil {
		return time.Now()
	}
	return w.Now()
}
