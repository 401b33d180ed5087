package events

import (
	"hash/fnv"
	"strconv"
	"strings"
)

// Partitions is the number of key partitions of the platform, fixed for the
// life of a deployment: timeoutd instances own partitions, not keys, and a
// partition moves between instances whole. It is much larger than any
// plausible instance count, so that partitions spread evenly.
const Partitions = 64

// PartitionOf returns the partition of key: FNV-1a (32 bits) of the key's
// bytes modulo Partitions. It is the hash NATS's partition() subject
// transform computes, so the command stream files each command under
// timeouts.cmd.<partition>.<key> with the same result (see
// PartitionedCommandSubject).
func PartitionOf(key string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % Partitions)
}

// CommandSubjectTransform is the subject transform of the command stream:
// producers publish on timeouts.cmd.<key> (CommandSubject) and the stream
// stores the command under timeouts.cmd.<partition>.<key>, so that each
// partition's commands are consumed by the instance that owns it.
const (
	CommandTransformSource      = CommandSubjectPrefix + "*"
	CommandTransformDestination = CommandSubjectPrefix + "{{partition(64,1)}}.{{wildcard(1)}}"
)

// PartitionedCommandSubject returns the subject a command for key is
// stored under in the command stream: timeouts.cmd.<partition>.<key>.
func PartitionedCommandSubject(key string) string {
	return CommandSubjectPrefix + strconv.Itoa(PartitionOf(key)) + "." + key
}

// PartitionCommandSubjects returns the filter of partition p's commands in
// the command stream: timeouts.cmd.<p>.*.
func PartitionCommandSubjects(p int) string {
	return CommandSubjectPrefix + strconv.Itoa(p) + ".*"
}

// KeyOfStoredCommand returns the key of a command as stored in the command
// stream (timeouts.cmd.<partition>.<key>), and false when the subject is not
// of that form or its partition token is not the key's partition.
func KeyOfStoredCommand(subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, CommandSubjectPrefix)
	if !ok {
		return "", false
	}
	part, key, ok := strings.Cut(rest, ".")
	if !ok || !ValidKey(key) || part != strconv.Itoa(PartitionOf(key)) {
		return "", false
	}
	return key, true
}
