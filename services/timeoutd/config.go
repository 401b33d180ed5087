package timeoutd

import (
	"cmp"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ordertimeout/ordertimeout/pkg/events"
	"github.com/ordertimeout/ordertimeout/services/timeoutd/internal/lease"
)

// Defaults of Config.
const (
	// TickDefault is the wheel's resolution; lateness is below one tick plus
	// the batch's transaction and PubAck.
	TickDefault = time.Millisecond
	// MaxPendingDefault bounds the timeouts held in memory.
	MaxPendingDefault = 20_000_000
	// MaxHorizonDefault is the furthest accepted deadline from now.
	MaxHorizonDefault = 400 * 24 * time.Hour
	// FireBatchDefault is the most timeouts in one fire batch.
	FireBatchDefault = 5000
	// FireConcurrencyDefault is the most fire transactions in flight.
	FireConcurrencyDefault = 2
	// MarkDelayDefault is how long the fire path gathers published
	// batches before marking them fired in one transaction.
	MarkDelayDefault = 20 * time.Millisecond
	// IngestLanesDefault is the number of sub-batches of a command batch
	// upserted concurrently, split by key partition.
	IngestLanesDefault = 2
	// RecoveryBatchDefault is the page size of the recovery load.
	RecoveryBatchDefault = 50_000
	// RecoveryCatchupMaxDefault bounds how long recovery holds the overdue
	// timeouts while ingest consumes the commands that waited in the source.
	RecoveryCatchupMaxDefault = 10 * time.Second
	// OverdueRateDefault is how many overdue timeouts per second recovery
	// releases, so a long outage does not flood NATS at once.
	OverdueRateDefault = 20_000
	// TombstoneTTLDefault is how long cleared and fired keys keep their
	// fire data after the clear or the fire; then they shrink to a version
	// mark.
	TombstoneTTLDefault = time.Hour
	// MarkRetentionMin is the shortest MarkRetention: a legitimate command
	// delayed longer (an outage of timeoutd, a backlog) is refused, and it
	// is then up to the producer's reconciliation.
	MarkRetentionMin = 24 * time.Hour
	// MarkClockSkew is how much later than its retention a mark is deleted:
	// a command's IssuedAt comes from its producer's clock and a mark's age
	// from timeoutd's, so a producer's clock ahead by less than this cannot
	// let a stale command pass the age check after its mark is gone.
	MarkClockSkew = time.Hour
	// JanitorIntervalDefault is how often the janitor looks for expired
	// tombstones.
	JanitorIntervalDefault = 10 * time.Second
	// JanitorBatchDefault is the most tombstones deleted per statement.
	JanitorBatchDefault = 10_000
	// RetryDelayDefault bounds the pause after a failed database operation.
	RetryDelayDefault = 500 * time.Millisecond
	// LeaseTTLDefault is how long a partition lease lasts without renewal,
	// by Postgres's clock: a crashed instance's partitions move after it.
	LeaseTTLDefault = 3 * time.Second
	// LeaseRenewIntervalDefault is how often leases are renewed and the
	// partitions rebalanced.
	LeaseRenewIntervalDefault = time.Second
	// LeaseProbeIntervalDefault is how often, between rounds, an instance
	// looks for the partitions of a crashed instance to take over.
	LeaseProbeIntervalDefault = 100 * time.Millisecond
	// CrashGraceDefault is the store's crash grace: how long an instance's
	// database sessions stay gone before the others take its partitions
	// (postgres.CrashGrace).
	CrashGraceDefault = 250 * time.Millisecond
	// RecentDefault is the number of recent expiries kept for the API.
	RecentDefault = 200
)

// Config configures a Service. The zero value plus the adapters is valid.
type Config struct {
	// FireSubjectPrefixes are the allowed fire subject prefixes, each ending
	// in "."; default [events.OrderCancelSubjectPrefix]. Without Tenants,
	// they are the orders tenant's, the only one: commands of any other
	// tenant are dead-lettered (unknown_tenant), and those with another
	// fire subject too (subject_not_allowed). With Tenants, they are every
	// tenant's (those the expiry stream must capture).
	FireSubjectPrefixes []string `env:"FIRE_SUBJECT_PREFIXES" envSeparator:","`
	// Tenants, when set, is the registry of the tenants whose commands are
	// accepted, and of each one's fire subject prefixes (the daemon's
	// TIMEOUTD_TENANTS_FILE); a command is dead-lettered when its
	// subject's tenant is unknown (unknown_tenant), its key is another
	// tenant's (foreign_key) or its fire subject is under none of its
	// tenant's prefixes (subject_not_allowed). Default: the orders tenant
	// alone, with FireSubjectPrefixes.
	Tenants Tenants
	// DefaultFireSubjectPrefix makes a timeout's fire subject, prefix plus
	// key, the default one: stored as nothing, so that the timeout is plain
	// (it fires without a read of its row) when it stores nothing else.
	// Under one of FireSubjectPrefixes; default
	// events.OrderCancelSubjectPrefix. The pending rows stored with the
	// default depend on it: the store refuses another one while any is
	// left (postgres.Store.PinDefaultFireSubject).
	DefaultFireSubjectPrefix string `env:"DEFAULT_FIRE_SUBJECT_PREFIX"`
	// Tick is the wheel's resolution; default TickDefault.
	Tick time.Duration `env:"TICK"`
	// MaxPending bounds the pending timeouts in memory. Only a set for a
	// key not held in memory needs room: at the bound such sets are
	// deferred (negatively acknowledged, redelivered after RetryDelay)
	// while clears and the other commands go on. Default MaxPendingDefault.
	MaxPending int `env:"MAX_PENDING"`
	// MaxHorizon is the furthest accepted deadline from now; further ones
	// are dead-lettered (deadline_out_of_range). Default MaxHorizonDefault.
	MaxHorizon time.Duration `env:"MAX_HORIZON"`
	// IngestLanes is the number of concurrent upserts a command batch is
	// split into by key partition; default IngestLanesDefault.
	IngestLanes int
	// FireBatch is the most timeouts per fire batch (one read, one
	// publish window); default FireBatchDefault.
	FireBatch int `env:"FIRE_BATCH"`
	// FireConcurrency is the most fire batches being read and published at
	// once: the wheel's next batch is taken while earlier ones wait for
	// their PubAcks, so an expiry waits for its own batch, not for its
	// predecessors'. A batch's slot is freed at its PubAcks; the marks of
	// the batches published meanwhile go in one transaction. Default
	// FireConcurrencyDefault.
	FireConcurrency int `env:"FIRE_CONCURRENCY"`
	// MarkDelay is how long the fire path gathers the batches whose events
	// are stored before it marks their rows fired, in one fenced
	// transaction: fewer, larger marks cost Postgres and timeoutd less per
	// expiry. It delays no event (they are published already), only the
	// moment their rows stop being pending: a crash in between publishes
	// them again under the same Nats-Msg-Id. Default MarkDelayDefault.
	MarkDelay time.Duration `env:"MARK_DELAY"`
	// RecoveryBatch is the page size of the recovery load; default
	// RecoveryBatchDefault.
	RecoveryBatch int
	// OverdueRate is how many overdue timeouts per second are released after
	// recovery; default OverdueRateDefault.
	OverdueRate int `env:"OVERDUE_RATE"`
	// RecoveryCatchupMax bounds how long recovery holds the overdue
	// timeouts until ingest has consumed every command that was waiting in
	// the source when the pending rows were loaded (a clear queued during an
	// outage must win over the overdue timeout it clears); past it they are
	// released anyway. Default RecoveryCatchupMaxDefault.
	RecoveryCatchupMax time.Duration `env:"RECOVERY_CATCHUP_MAX"`
	// TombstoneTTL is how long a cleared or fired key keeps its fire data
	// before it shrinks to a version mark; default TombstoneTTLDefault.
	TombstoneTTL time.Duration `env:"TOMBSTONE_TTL"`
	// MarkRetention, when set, is how long a version mark is kept
	// (TIMEOUTD_MARK_RETENTION, at least MarkRetentionMin): commands must
	// then carry events.Command.IssuedAt, those issued longer ago than it
	// are dead-lettered (events.ReasonCommandTooOld), and the janitor
	// deletes the marks whose tombstone is older than it plus
	// MarkClockSkew. A stale command, issued before the version its key's
	// mark kept, is then refused by its age once the mark is gone, so the
	// table holds the keys of the retention and not every key ever seen.
	// Default 0: marks are kept for good and IssuedAt is not needed.
	MarkRetention time.Duration `env:"MARK_RETENTION"`
	// JanitorInterval is the pause between tombstone sweeps; default
	// JanitorIntervalDefault.
	JanitorInterval time.Duration
	// JanitorBatch is the most tombstones deleted per statement; default
	// JanitorBatchDefault.
	JanitorBatch int
	// RetryDelay bounds the pause after a failed database operation:
	// ingest's retries back off from 100 ms up to it (retry.Backoff), a
	// failed fire is re-armed after it; default RetryDelayDefault.
	RetryDelay time.Duration
	// Recent is the number of recent expiries kept; default RecentDefault.
	Recent int
	// InstanceID names this instance in the lease table; it must be unique
	// among the live instances and may be reused by the same instance after
	// a restart (its leases are then taken over at once instead of after
	// LeaseTTL). Default: the host name.
	InstanceID string `env:"INSTANCE_ID"`
	// LeaseTTL is how long a partition lease lasts without renewal; default
	// LeaseTTLDefault. Without a renewal for two thirds of it (the renew
	// deadline, from before the last renewal was sent), the instance stops
	// every partition, before the lease can expire anywhere else.
	LeaseTTL time.Duration `env:"LEASE_TTL"`
	// LeaseRenewInterval is the pause between lease rounds (heartbeat,
	// renewal, rebalance); below the renew deadline. Default
	// LeaseRenewIntervalDefault.
	LeaseRenewInterval time.Duration `env:"LEASE_RENEW_INTERVAL"`
	// LeaseProbeInterval is how often, between rounds, the instance looks
	// for orphaned partitions (those of an instance whose database sessions
	// are all gone: it crashed) to take over at once; at most
	// LeaseRenewInterval. Default LeaseProbeIntervalDefault.
	LeaseProbeInterval time.Duration `env:"LEASE_PROBE_INTERVAL"`
	// CrashGrace is how long after this instance's database sessions are
	// all gone the others may take its partitions (the Leases' crash
	// detection; the daemon passes postgres.CrashGrace). Fires are
	// published only within four fifths of it after the sending of the
	// last statement that reached the database, so that an instance cut
	// off from it stops publishing before its partitions can move. At
	// least twice LeaseProbeInterval; default CrashGraceDefault.
	CrashGrace time.Duration
	// Now is the wall clock; default time.Now. Deadlines are judged by a
	// clock that runs on the monotonic clock from one reading of Now at
	// start, corrected by the heartbeats' measure of Postgres's clock
	// (monoClock): a later step of the wall clock moves nothing.
	Now func() time.Time
	// ClockSkew (TIMEOUTD_CLOCK_SKEW) moves this instance's wall clock
	// Now, as a host clock set wrong would: for fault injection only (a
	// chaos run skews one instance to show that it never fires early by
	// Postgres's clock). Default 0.
	ClockSkew time.Duration `env:"CLOCK_SKEW"`
	// Logger receives the service's logs; default slog.Default().
	Logger *slog.Logger
}

// DefaultInstanceID is the InstanceID of a Config that sets none: the host
// name (a container's is unique on its network).
func DefaultInstanceID() (string, error) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		return "", fmt.Errorf("timeoutd: InstanceID is empty and the host name is unknown: %v", err)
	}
	return host, nil
}

// withDefaults returns c with defaults applied, or an error naming the first
// invalid field.
func (c Config) withDefaults() (Config, error) {
	if len(c.FireSubjectPrefixes) == 0 {
		c.FireSubjectPrefixes = []string{events.OrderCancelSubjectPrefix}
	}
	if c.Tenants == nil {
		c.Tenants = ordersOnly(c.FireSubjectPrefixes)
	}
	c.DefaultFireSubjectPrefix = cmp.Or(c.DefaultFireSubjectPrefix, events.OrderCancelSubjectPrefix)
	c.Tick = cmp.Or(c.Tick, TickDefault)
	c.MaxPending = cmp.Or(c.MaxPending, MaxPendingDefault)
	c.MaxHorizon = cmp.Or(c.MaxHorizon, MaxHorizonDefault)
	c.FireBatch = cmp.Or(c.FireBatch, FireBatchDefault)
	c.FireConcurrency = cmp.Or(c.FireConcurrency, FireConcurrencyDefault)
	c.MarkDelay = cmp.Or(c.MarkDelay, MarkDelayDefault)
	c.IngestLanes = cmp.Or(c.IngestLanes, IngestLanesDefault)
	c.RecoveryBatch = cmp.Or(c.RecoveryBatch, RecoveryBatchDefault)
	c.OverdueRate = cmp.Or(c.OverdueRate, OverdueRateDefault)
	c.RecoveryCatchupMax = cmp.Or(c.RecoveryCatchupMax, RecoveryCatchupMaxDefault)
	c.TombstoneTTL = cmp.Or(c.TombstoneTTL, TombstoneTTLDefault)
	c.JanitorInterval = cmp.Or(c.JanitorInterval, JanitorIntervalDefault)
	c.JanitorBatch = cmp.Or(c.JanitorBatch, JanitorBatchDefault)
	c.RetryDelay = cmp.Or(c.RetryDelay, RetryDelayDefault)
	c.Recent = cmp.Or(c.Recent, RecentDefault)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, LeaseTTLDefault)
	c.LeaseRenewInterval = cmp.Or(c.LeaseRenewInterval, LeaseRenewIntervalDefault)
	c.LeaseProbeInterval = min(cmp.Or(c.LeaseProbeInterval, LeaseProbeIntervalDefault), c.LeaseRenewInterval)
	c.CrashGrace = cmp.Or(c.CrashGrace, CrashGraceDefault)
	if c.InstanceID == "" {
		id, err := DefaultInstanceID()
		if err != nil {
			return c, err
		}
		c.InstanceID = id
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if skew := c.ClockSkew; skew != 0 {
		now := c.Now
		c.Now = func() time.Time { return now().Add(skew) }
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, c.validate()
}

// validate reports the first setting of c, defaults applied, out of range.
func (c Config) validate() error {
	for _, p := range c.FireSubjectPrefixes {
		if !strings.HasSuffix(p, ".") || !events.ValidSubject(strings.TrimSuffix(p, ".")) {
			return fmt.Errorf("timeoutd: FireSubjectPrefixes: %q must be a literal subject followed by '.'", p)
		}
	}
	d := c.DefaultFireSubjectPrefix
	if !strings.HasSuffix(d, ".") || !events.ValidSubject(strings.TrimSuffix(d, ".")) ||
		!slices.ContainsFunc(c.FireSubjectPrefixes, func(p string) bool { return strings.HasPrefix(d, p) }) {
		return fmt.Errorf("timeoutd: DefaultFireSubjectPrefix: %q must be a literal subject followed by '.', under one of FireSubjectPrefixes %v", d, c.FireSubjectPrefixes)
	}
	switch {
	case c.Tick < 0:
		return fmt.Errorf("timeoutd: Tick must be positive, got %v", c.Tick)
	case c.MaxPending < 1:
		return fmt.Errorf("timeoutd: MaxPending must be positive, got %d", c.MaxPending)
	case c.MaxHorizon < 0:
		return fmt.Errorf("timeoutd: MaxHorizon must be positive, got %v", c.MaxHorizon)
	case c.FireBatch < 1:
		return fmt.Errorf("timeoutd: FireBatch must be positive, got %d", c.FireBatch)
	case c.FireConcurrency < 1 || c.FireConcurrency > 64:
		return fmt.Errorf("timeoutd: FireConcurrency must be in [1, 64], got %d", c.FireConcurrency)
	case c.MarkDelay < 0 || c.MarkDelay > time.Second:
		return fmt.Errorf("timeoutd: MarkDelay must be positive and at most 1s, got %v", c.MarkDelay)
	case c.IngestLanes < 1 || c.IngestLanes > 64:
		return fmt.Errorf("timeoutd: IngestLanes must be in [1, 64], got %d", c.IngestLanes)
	case c.RecoveryBatch < 1:
		return fmt.Errorf("timeoutd: RecoveryBatch must be positive, got %d", c.RecoveryBatch)
	case c.OverdueRate < 1:
		return fmt.Errorf("timeoutd: OverdueRate must be positive, got %d", c.OverdueRate)
	case c.RecoveryCatchupMax < 0:
		return fmt.Errorf("timeoutd: RecoveryCatchupMax must be positive, got %v", c.RecoveryCatchupMax)
	case c.TombstoneTTL < 0:
		return fmt.Errorf("timeoutd: TombstoneTTL must be positive, got %v", c.TombstoneTTL)
	case c.MarkRetention != 0 && c.MarkRetention < MarkRetentionMin:
		return fmt.Errorf("timeoutd: MarkRetention must be 0 (keep marks for good) or at least %v, got %v", MarkRetentionMin, c.MarkRetention)
	case c.JanitorInterval < 0:
		return fmt.Errorf("timeoutd: JanitorInterval must be positive, got %v", c.JanitorInterval)
	case c.JanitorBatch < 1:
		return fmt.Errorf("timeoutd: JanitorBatch must be positive, got %d", c.JanitorBatch)
	case c.RetryDelay < 0:
		return fmt.Errorf("timeoutd: RetryDelay must be positive, got %v", c.RetryDelay)
	case c.LeaseTTL < 300*time.Millisecond:
		return fmt.Errorf("timeoutd: LeaseTTL must be at least 300ms, got %v", c.LeaseTTL)
	case c.LeaseRenewInterval <= 0 || c.LeaseRenewInterval >= c.renewDeadline():
		return fmt.Errorf("timeoutd: LeaseRenewInterval must be positive and below two thirds of LeaseTTL (%v), got %v",
			c.renewDeadline(), c.LeaseRenewInterval)
	case c.LeaseProbeInterval < time.Millisecond:
		return fmt.Errorf("timeoutd: LeaseProbeInterval must be at least 1ms, got %v", c.LeaseProbeInterval)
	case c.LeaseProbeInterval > c.CrashGrace/2:
		return fmt.Errorf("timeoutd: LeaseProbeInterval must be at most half of CrashGrace (%v), got %v", c.CrashGrace, c.LeaseProbeInterval)
	case len(c.InstanceID) > 200:
		return fmt.Errorf("timeoutd: InstanceID must be at most 200 bytes, got %d", len(c.InstanceID))
	case c.Recent < 1:
		return fmt.Errorf("timeoutd: Recent must be positive, got %d", c.Recent)
	}
	return nil
}

// renewDeadline is how long after sending a renewal the leases are trusted
// here without another (lease.Config.RenewDeadline).
func (c Config) renewDeadline() time.Duration { return lease.Config{TTL: c.LeaseTTL}.RenewDeadline() }

// contactWindow is how long after sending the last statement that reached
// the database this instance publishes fires: four fifths of CrashGrace,
// the rest a margin for the publish in transit.
func (c Config) contactWindow() time.Duration { return c.CrashGrace * 4 / 5 }
