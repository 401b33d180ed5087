package view

import (
	"strconv"
	"strings"
)

// Member is one line of the cluster table: a live timeoutd instance.
type Member struct {
	ID string
	// Self marks the instance serving this page.
	Self bool
	// Partitions is how many it owns; Ranges lists them compactly
	// ("0-9, 12, 40-63").
	Partitions, Ranges     string
	Pending, FiredRate     string
	LatencyP50, LatencyMax string
}

// ClusterSummary is the caption of the cluster table, e.g. "3 instances,
// 64 of 64 partitions owned".
func (s *State) ClusterSummary() string {
	c := s.Cluster
	owned := 0
	for _, in := range c.Instances {
		owned += len(in.Partitions)
	}
	n := len(c.Instances)
	word := "instances"
	if n == 1 {
		word = "instance"
	}
	return strconv.Itoa(n) + " " + word + ", " + strconv.Itoa(owned) + " of " + strconv.Itoa(c.Partitions) + " partitions owned"
}

// Members formats the cluster's instances, in the server's order (by id).
func (s *State) Members() []Member {
	out := make([]Member, len(s.Cluster.Instances))
	for i, in := range s.Cluster.Instances {
		out[i] = Member{
			ID: in.ID, Self: in.Self,
			Partitions: strconv.Itoa(len(in.Partitions)), Ranges: Ranges(in.Partitions),
			Pending: FormatCount(in.Pending), FiredRate: FormatRate(in.FiredPerSec),
			LatencyP50: FormatMillis(in.LatenessP50Ms), LatencyMax: FormatMillis(in.LatenessMaxMs),
		}
	}
	return out
}

// Ranges formats sorted partition numbers as ranges: [0 1 2 5 7 8] is
// "0-2, 5, 7-8"; none is "none".
func Ranges(parts []int) string {
	if len(parts) == 0 {
		return "none"
	}
	var b strings.Builder
	for i := 0; i < len(parts); {
		j := i
		for j+1 < len(parts) && parts[j+1] == parts[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(parts[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(parts[j]))
		}
		i = j + 1
	}
	return b.String()
}
