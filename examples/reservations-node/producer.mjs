// A producer service in Node.js, written from the platform's contract
// (docs/contract/asyncapi.yaml) alone: it sets, moves and clears the
// deadlines of a run of keys, consumes their expiries through its durable
// consumer, and checks what it got: every deadline it left fires once, at
// its last version, never before it; nothing it cleared fires.
//
//   npm ci && node producer.mjs
//
// Settings (environment): NATS_URL (nats://127.0.0.1:4222), NATS_USER and
// NATS_PASSWORD (reservations / reservations-dev, the compose stack's; the
// user is the tenant: its keys are <user>.<key>, its durable consumer is
// named after it), FIRE_PREFIX (reservations.expire., the tenant's fire
// subject prefix in the platform's tenant registry),
// KEYS (40, how many deadlines), DEADLINE_MS (2000, the first deadline
// after now; a moved one is 2 s later), TIMEOUT_MS (30000, how long to wait
// for the expiries). It prints one JSON line with the counts and exits 1
// when a check failed.
import { randomBytes } from 'node:crypto';
import { connect, headers } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { ensureConsumer, watchRefusals } from './contract.mjs';

const env = process.env;
const cfg = {
  url: env.NATS_URL ?? 'nats://127.0.0.1:4222',
  user: env.NATS_USER ?? 'reservations',
  pass: env.NATS_PASSWORD ?? 'reservations-dev',
  firePrefix: env.FIRE_PREFIX ?? 'reservations.expire.',
  keys: Number(env.KEYS ?? 40),
  deadlineMs: Number(env.DEADLINE_MS ?? 2000),
  timeoutMs: Number(env.TIMEOUT_MS ?? 30000),
};

// The contract: the tenant (its NATS user's name), whose keys are
// <tenant>.<key> and whose commands go to timeouts.cmd.<tenant>.<key>, the
// only command subjects its user may publish; the stream, its fire subject
// prefix and durable consumer (named after the tenant: its user may use no
// other), and the consumer's settings (channel fired,
// x-jetstream.consumer), shared by every instance.
const TENANT = cfg.user;
const tenantKey = (local) => `${TENANT}.${local}`;
const commandSubject = (key) => `timeouts.cmd.${key}`;
const FIRE_PREFIX = cfg.firePrefix;
const STREAM = 'TIMEOUT_EXPIRIES';
const DURABLE = TENANT;
const CONSUMER = {
  durable_name: DURABLE,
  filter_subject: `${FIRE_PREFIX}>`,
  deliver_policy: 'all',
  ack_policy: 'explicit',
  ack_wait: 2_000_000_000, // nanoseconds; each event is acked at once, so no progress acks
  max_deliver: -1,
  max_ack_pending: 1000,
  replay_policy: 'instant',
  num_replicas: 0,
};

// Times are RFC 3339; the platform writes nanoseconds. timeNs reads one
// into nanoseconds since the epoch (a BigInt), so that nothing is rounded.
const RFC3339 = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})$/;
function timeNs(s) {
  const m = RFC3339.exec(s);
  if (!m) throw new Error(`not an RFC 3339 time: ${s}`);
  const seconds = BigInt(Date.parse(m[1] + m[3])) / 1000n;
  return seconds * 1_000_000_000n + BigInt((m[2] ?? '').padEnd(9, '0').slice(0, 9));
}
const nowNs = () => BigInt(Date.now()) * 1_000_000n;
const iso = (ms) => new Date(ms).toISOString(); // UTC, milliseconds: valid RFC 3339

// decodeExpiry reads an expiry as its schema says (expiry.schema.json, with
// outcome fired on a fire subject) and throws on anything else. The
// version is an integer: JSON.parse reads it exactly up to 2^53.
function decodeExpiry(data) {
  const e = JSON.parse(new TextDecoder().decode(data));
  const schema = e.schema ?? 1;
  if (schema !== 1) throw new Error(`unsupported schema ${schema}`);
  if (e.outcome !== 'fired') throw new Error(`outcome ${e.outcome} on a fire subject`);
  if (typeof e.key !== 'string' || !/^([a-z][a-z0-9_]{0,31}\.)?[A-Za-z0-9_-]{1,128}$/.test(e.key)) throw new Error(`invalid key ${e.key}`);
  if (!Number.isSafeInteger(e.version) || e.version < 1) throw new Error(`invalid version ${e.version}`);
  const deadline = timeNs(e.deadline);
  const firedAt = timeNs(e.fired_at);
  if (firedAt < deadline) throw new Error(`fired_at ${e.fired_at} before deadline ${e.deadline}`);
  return { ...e, deadlineNs: deadline, firedAtNs: firedAt };
}

const nc = await connect({
  servers: cfg.url.split(','),
  user: cfg.user,
  pass: cfg.pass,
  name: 'reservations-node',
  // The user may subscribe only below its own inbox prefix.
  inboxPrefix: `_INBOX_${cfg.user}`,
});
const refusals = watchRefusals(nc);
const js = jetstream(nc);
const jsm = await jetstreamManager(nc);
// Every instance of the service creates the durable with the contract's
// settings, or updates it to them when it exists with others (an earlier
// version's, say): ensureConsumer.
await ensureConsumer(jsm, STREAM, CONSUMER);

// publish sends a command with its Nats-Msg-Id, <kind>:<key>:<version>:<nonce>:
// the nonce is 128 random bits, minted once for the command and sent again
// on every retry of it, so that a republish is dropped as a duplicate and
// no other tenant can know the id first. It waits for JetStream's PubAck;
// a publish the user may not make has none, and refusals.explain says why.
async function publish(cmd) {
  cmd.msgId ??= `${cmd.kind}:${cmd.key}:${cmd.version}:${randomBytes(16).toString('base64url')}`;
  const { msgId, ...fields } = cmd;
  const h = headers();
  h.set('Nats-Msg-Id', msgId);
  try {
    // A duplicate PubAck (ack.duplicate) is this command's own earlier
    // publish: nobody else knows its nonce.
    return await js.publish(commandSubject(cmd.key), JSON.stringify({ schema: 1, ...fields, issued_at: iso(Date.now()) }), { headers: h });
  } catch (err) {
    throw refusals.explain(err, commandSubject(cmd.key));
  }
}

// The run's keys: a fresh prefix, so keys of other runs are not ours.
// Every fifth key is moved 2 s later (version 2), every fifth other one
// cleared (version 2); the rest keep their first deadline.
const run = `rn-${randomBytes(4).toString('hex')}`;
const want = new Map(); // key → { version, deadlineNs } expected to fire; absent: must not fire
const start = Date.now();
let lastDeadlineMs = start; // of any command, cleared ones' included
const counts = { set: 0, moved: 0, cleared: 0 };
await Promise.all(Array.from({ length: cfg.keys }, async (_, i) => {
  const local = `${run}-${i}`;
  const key = tenantKey(local);
  const first = start + cfg.deadlineMs + (i % 10) * 50;
  lastDeadlineMs = Math.max(lastDeadlineMs, first);
  await publish({ kind: 'set', key, version: 1, deadline: iso(first), fire_subject: FIRE_PREFIX + local, payload: { n: i } });
  counts.set++;
  if (i % 5 === 1) {
    const moved = first + 2000;
    lastDeadlineMs = Math.max(lastDeadlineMs, moved);
    await publish({ kind: 'set', key, version: 2, deadline: iso(moved), fire_subject: FIRE_PREFIX + local, payload: { n: i, moved: true } });
    counts.moved++;
    want.set(key, { version: 2, deadlineNs: BigInt(moved) * 1_000_000n });
  } else if (i % 5 === 2) {
    await publish({ kind: 'clear', key, version: 2 });
    counts.cleared++;
  } else {
    want.set(key, { version: 1, deadlineNs: BigInt(first) * 1_000_000n });
  }
}));

// Consume the expiries. An event of a key of another run is acked as the
// service would: nothing of its own to apply.
const problems = { early: 0, stale: 0, duplicate: 0, unexpected: 0, invalid: 0, missing: 0 };
const seen = new Set(); // Nats-Msg-Ids received
const got = new Set(); // keys whose expected expiry came
const lateMs = [];
let other = 0;
const consumer = await js.consumers.get(STREAM, DURABLE);
const messages = await consumer.consume({ max_messages: 100 });
const stop = setTimeout(() => messages.stop(), cfg.timeoutMs);
let grace;
for await (const m of messages) {
  const receivedNs = nowNs();
  let e;
  try {
    e = decodeExpiry(m.data);
  } catch (err) {
    // A real service dead-letters it on dlq.<tenant>.<reason>.
    console.error(`invalid expiry on ${m.subject}: ${err.message}`);
    problems.invalid++;
    m.term();
    continue;
  }
  m.ack();
  if (!e.key.startsWith(tenantKey(`${run}-`))) {
    other++;
    continue;
  }
  const id = m.headers?.get('Nats-Msg-Id');
  if (id !== `fired:${e.key}:${e.version}`) {
    console.error(`expiry ${e.key} v${e.version} with Nats-Msg-Id ${id}`);
    problems.invalid++;
  }
  const w = want.get(e.key);
  if (seen.has(id)) {
    problems.duplicate++;
  } else if (!w) {
    console.error(`expiry of cleared key ${e.key} v${e.version}`);
    problems.unexpected++;
  } else if (e.version !== w.version || e.deadlineNs !== w.deadlineNs) {
    console.error(`stale expiry ${e.key} v${e.version}, want v${w.version}`);
    problems.stale++;
  } else if (receivedNs < w.deadlineNs) {
    console.error(`early expiry ${e.key}: received ${receivedNs - w.deadlineNs} ns before its deadline`);
    problems.early++;
  } else {
    lateMs.push(Number(receivedNs - w.deadlineNs) / 1e6);
  }
  if (w && e.version === w.version) got.add(e.key);
  seen.add(id);
  // Every expected one in: wait until a second past the last deadline
  // (a cleared one's too) for a duplicate or a cleared key's, then stop.
  if (!grace && got.size === want.size) {
    grace = setTimeout(() => messages.stop(), Math.max(0, lastDeadlineMs - Date.now()) + 1000);
  }
}
clearTimeout(stop);
clearTimeout(grace);
problems.missing = want.size - got.size;
await nc.drain();

lateMs.sort((a, b) => a - b);
const p = (q) => (lateMs.length ? lateMs[Math.min(lateMs.length - 1, Math.ceil(q * lateMs.length) - 1)] : null);
const failed = Object.values(problems).some((n) => n > 0);
console.log(JSON.stringify({
  run, ...counts, fired: lateMs.length, other_runs: other, ...problems,
  lateness_ms: { p50: p(0.5), p99: p(0.99), max: p(1) },
  ok: !failed,
}));
process.exit(failed ? 1 : 0);
