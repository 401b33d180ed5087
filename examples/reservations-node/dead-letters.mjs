// A tenant reads the dead letters of its commands, and replays them once
// fixed, from the contract alone (docs/contract/asyncapi.yaml, channel
// tenantDeadLetters): timeoutd publishes each command it refuses on
// dlq.timeoutd.<tenant>.<reason>, and the tenant's NATS user may read them
// through one durable consumer, <tenant>-dlq, filtered on exactly that.
//
//   node dead-letters.mjs            # list them, one JSON line each; acks nothing
//   REPLAY=1 node dead-letters.mjs   # replay each on its subject as it is, and ack it
//
// Settings (environment): NATS_URL, NATS_USER, NATS_PASSWORD as for
// producer.mjs (the user is the tenant). A replay publishes the dead
// letter's data (fix it first: the producer's own repair goes where
// `fixed` is) on its subject with the Nats-Msg-Id replay:<dead letter id>,
// so JetStream does not drop it as a duplicate of the refused command.
import { connect, headers } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { deadLetterMsgID, ensureConsumer } from './contract.mjs';

const env = process.env;
const user = env.NATS_USER ?? 'reservations';
const nc = await connect({
  servers: (env.NATS_URL ?? 'nats://127.0.0.1:4222').split(','),
  user,
  pass: env.NATS_PASSWORD ?? 'reservations-dev',
  name: `${user}-dead-letters`,
  inboxPrefix: `_INBOX_${user}`,
});
const js = jetstream(nc);
const jsm = await jetstreamManager(nc);
const durable = `${user}-dlq`;
// The filter is part of the subject the user may call: one filter, this
// one. The settings are the contract's (channel tenantDeadLetters,
// x-jetstream.consumer).
await ensureConsumer(jsm, 'DEAD_LETTERS', {
  durable_name: durable, filter_subject: `dlq.timeoutd.${user}.>`, deliver_policy: 'all', ack_policy: 'explicit',
  ack_wait: 30_000_000_000, max_deliver: -1, replay_policy: 'instant', num_replicas: 0,
});
const consumer = await js.consumers.get('DEAD_LETTERS', durable);

let n = 0;
const seen = new Set(); // stream sequences listed: a listed one comes back at once
for (;;) {
  const m = await consumer.next({ expires: 1000 });
  if (!m) break; // none left
  if (seen.has(m.seq)) {
    m.nak();
    break; // every one listed
  }
  seen.add(m.seq);
  const d = m.json();
  const data = Buffer.from(d.data, 'base64');
  console.log(JSON.stringify({ reason: d.reason, field: d.field, detail: d.detail, subject: d.subject, command: data.toString() }));
  if (env.REPLAY === '1') {
    const fixed = data; // the producer's own repair of the command goes here
    const h = headers();
    h.set('Nats-Msg-Id', `replay:${deadLetterMsgID(d)}`);
    await js.publish(d.subject, fixed, { headers: h });
    m.ack();
  } else {
    m.nak(); // listed, not handled: back to the consumer
  }
  n++;
}
console.error(`${n} dead letters${env.REPLAY === '1' ? ' replayed' : ''}`);
await nc.drain();
