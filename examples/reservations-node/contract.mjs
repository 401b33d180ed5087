// What a service of any tenant needs of the platform's contract
// (docs/contract/asyncapi.yaml) beyond the messages themselves, shared by
// producer.mjs and dead-letters.mjs.
import { createHash } from 'node:crypto';
import { errors } from '@nats-io/transport-node';
import { JetStreamApiError } from '@nats-io/jetstream';

// JetStream's error code for a consumer created with settings other than
// those of the durable that exists.
const CONSUMER_EXISTS = 10148;

// ensureConsumer creates the durable consumer config.durable_name on
// stream with config, or, when it exists with other settings, updates it
// to config: the contract's "create or update", which nats.js's
// consumers.add alone does not do (it only creates). JetStream updates
// ack_wait, max_deliver, max_ack_pending, the filter and the like; it
// refuses to change deliver_policy, ack_policy or replay_policy, and the
// error then names the setting: the durable must be deleted by an
// operator and created again (docs/OPERATIONS.md, "Tenants").
export async function ensureConsumer(jsm, stream, config) {
  try {
    return await jsm.consumers.add(stream, config);
  } catch (err) {
    if (!(err instanceof JetStreamApiError && err.code === CONSUMER_EXISTS)) throw err;
  }
  const { durable_name: durable, ...settings } = config;
  try {
    return await jsm.consumers.update(stream, durable, settings);
  } catch (err) {
    throw new Error(`the durable ${durable} on ${stream} exists with settings JetStream cannot change to the contract's (${err.message}): an operator deletes it, and the next start creates it`, { cause: err });
  }
}

// watchRefusals follows the connection's status for the permissions
// violations the server reports there: a publish the user may not make
// gets no PubAck, so js.publish fails with a bare TimeoutError, and the
// reason comes only on the status stream, naming the subject as the
// server mapped it (a command on timeouts.cmd.<tenant>.<key> is checked
// as timeouts.cmd.<partition>.<tenant>.<key>). explain(err, subject)
// returns err, or an error that says a publish on subject timed out after
// the server refused a publish, and which.
export function watchRefusals(nc) {
  let last; // the latest permissions violation of a publish
  (async () => {
    for await (const s of nc.status()) {
      if (s.type === 'error' && s.error instanceof errors.PermissionViolationError && s.error.operation === 'publish') {
        last = s.error;
      }
    }
  })();
  return {
    explain(err, subject) {
      if (!(err instanceof errors.TimeoutError) || !last) return err;
      return new Error(`publish on ${subject} refused by the NATS server's permissions (it said: ${last.message}, about ${last.subject}, the subject as mapped): publish only on timeouts.cmd.<your tenant>.<key>`, { cause: err });
    },
  };
}

// deadLetterMsgID returns a dead letter's Nats-Msg-Id as the platform
// writes it: dlq:<subject>:<stream seq>[:<line>]:<digest>, the digest the
// first 16 bytes of SHA-256 over the rejected message's Nats-Msg-Id, a
// zero byte and its data, in hex. A replay is published with the id
// replay:<this>.
export function deadLetterMsgID(d) {
  const h = createHash('sha256');
  h.update(d.msg_id ?? '');
  h.update(Buffer.from([0]));
  h.update(Buffer.from(d.data ?? '', 'base64'));
  return `dlq:${d.subject}:${d.stream_seq}${d.line ? `:${d.line}` : ''}:${h.digest('hex').slice(0, 32)}`;
}
