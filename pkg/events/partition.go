package events

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// Partitions is the number of key partitions of the platform, fixed for the
// life of a deployment: timeoutd instances own partitions, not keys, and a
// partition moves between instances whole. It is much larger than any
// plausible instance count, so that partitions spread evenly.
const Partitions = 64

// PartitionOf returns the partition of key, a timeout key
// (ValidTimeoutKey): FNV-1a (32 bits) of its local key's bytes (the key
// without its tenant, see SplitKey) modulo Partitions. It is the hash NATS's
// partition() subject transform computes, so the server's subject mappings
// (CommandMappingDestination, TenantCommandMappingDestination) file each
// command under timeouts.cmd.<partition>.<key> with the same result (see
// PartitionedCommandSubject).
func PartitionOf(key string) int {
	if i := strings.IndexByte(key, '.'); i >= 0 {
		key = key[i+1:]
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % Partitions)
}

// CommandMappingSource and CommandMappingDestination, and
// TenantCommandMappingSource and TenantCommandMappingDestination, are the
// subject mappings every NATS server of the platform declares (mappings {
// … } in its configuration): producers publish on timeouts.cmd.<key>
// (CommandSubject) and the server rewrites the subject to
// timeouts.cmd.<partition>.<key> before any stream or permission sees it,
// so that the command lands in its partition's stream (CommandStream),
// consumed by the instance that owns the partition. The first mapping takes
// the orders tenant's commands, timeouts.cmd.<key>; the second the other
// tenants', timeouts.cmd.<tenant>.<key>, whose partition is their local
// key's. The tenant's token stays in the stored subject, where each
// tenant's NATS permissions bind it (timeouts.cmd.*.<tenant>.*; the orders
// tenant alone may publish timeouts.cmd.*.*): timeoutd learns a command's
// tenant from it.
const (
	CommandMappingSource            = CommandSubjectPrefix + "*"
	CommandMappingDestination       = CommandSubjectPrefix + "{{partition(64,1)}}.{{wildcard(1)}}" // 64: Partitions
	TenantCommandMappingSource      = CommandSubjectPrefix + "*.*"
	TenantCommandMappingDestination = CommandSubjectPrefix + "{{partition(64,2)}}.{{wildcard(1)}}.{{wildcard(2)}}"
)

// CommandStream returns the name of partition p's command stream:
// TIMEOUT_COMMANDS_00 … TIMEOUT_COMMANDS_63.
func CommandStream(p int) string { return fmt.Sprintf("%s%02d", StreamCommandsPrefix, p) }

// CommandStreams returns the names of every partition's command stream.
func CommandStreams() []string {
	names := make([]string, Partitions)
	for p := range names {
		names[p] = CommandStream(p)
	}
	return names
}

// PartitionedCommandSubject returns the subject a command for key is
// stored under in its partition's stream: timeouts.cmd.<partition>.<key>
// (timeouts.cmd.<partition>.<tenant>.<local key> for a tenant other than
// orders).
func PartitionedCommandSubject(key string) string {
	return CommandSubjectPrefix + strconv.Itoa(PartitionOf(key)) + "." + key
}

// PartitionCommandSubjects returns the subjects of partition p's commands,
// which its stream captures: timeouts.cmd.<p>.* (the orders tenant's) and
// timeouts.cmd.<p>.*.* (the other tenants'). Two subjects, not
// timeouts.cmd.<p>.>: a stream made before tenants captures the first,
// and JetStream refuses a stream whose subjects overlap.
func PartitionCommandSubjects(p int) []string {
	prefix := CommandSubjectPrefix + strconv.Itoa(p)
	return []string{prefix + ".*", prefix + ".*.*"}
}

// KeyOfStoredCommand returns the timeout key of a command as stored in a
// command stream (timeouts.cmd.<partition>.<key>, the key qualified by its
// tenant for a tenant other than orders), and false when the subject is not
// of that form or its partition token is not the key's partition.
func KeyOfStoredCommand(subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, CommandSubjectPrefix)
	if !ok {
		return "", false
	}
	part, key, ok := strings.Cut(rest, ".")
	if !ok || !ValidTimeoutKey(key) || part != strconv.Itoa(PartitionOf(key)) {
		return "", false
	}
	return key, true
}
