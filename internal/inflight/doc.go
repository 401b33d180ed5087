// Package inflight keeps the JetStream messages a consumer holds from
// being redelivered while it works on them. A consumer with a short
// AckWait gets the messages of a crashed instance redelivered to another
// within seconds; a Keeper tells the server, every third of AckWait, that
// each message still held here is in progress (the "+WPI" ack, which
// restarts its AckWait), so slow work is not redelivered meanwhile.
//
// A message is held from its receipt (before it waits for a worker) until
// it is released, which must come before its ack, nak or term: a Keeper
// sends nothing for a message once Release returned, so a progress ack
// never follows the settling one (it would restart a nak's delay).
//
// Cost: one small publish per held message per tick, none when nothing is
// held; a consumer bounds what it holds by its MaxAckPending.
//
// Its pull settings (PullExpiry, PullHeartbeat) bound the other wait of
// such a consumer: a pull request the server lost without a word.
package inflight
