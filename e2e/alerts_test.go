package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// alertRules is the file of the Prometheus alert rules, from e2e/.
const alertRules = "../deploy/prometheus/alerts.yaml"

// serviceMetric is a metric name of one of the services: every one they
// export starts with the service's name. patroniMetric is one of the
// Postgres cluster's members (Patroni's REST API, /metrics).
var (
	serviceMetric = regexp.MustCompile(`\b(?:timeoutd|orders)_[a-z0-9_]+\b`)
	patroniMetric = regexp.MustCompile(`\bpatroni_[a-z0-9_]+\b`)
)

// ruleMetrics returns the metrics matching re that the rules of file
// name, sorted, each once.
func ruleMetrics(file string, re *regexp.Regexp) ([]string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	names := re.FindAllString(string(data), -1)
	slices.Sort(names)
	return slices.Compact(names), nil
}

// missingMetrics returns the names a /metrics page (exposition text) does
// not serve: a name is served when its family has a # TYPE line, or, for
// name_bucket, _sum and _count, when name is a histogram or a summary.
func missingMetrics(page string, names []string) []string {
	types := map[string]string{}
	for _, line := range strings.Split(page, "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]] = f[3]
		}
	}
	var missing []string
	for _, n := range names {
		if _, ok := types[n]; ok {
			continue
		}
		served := false
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(n, suffix); ok && (types[base] == "histogram" || types[base] == "summary") {
				served = true
			}
		}
		if !served {
			missing = append(missing, n)
		}
	}
	return missing
}

func TestMissingMetrics(t *testing.T) {
	t.Parallel()
	page := "# HELP a_total A.\n# TYPE a_total counter\na_total 1\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\n# TYPE g gauge\n"
	got := missingMetrics(page, []string{"a_total", "h_bucket", "h_count", "g", "g_bucket", "b_total"})
	if want := []string{"g_bucket", "b_total"}; !slices.Equal(got, want) {
		t.Fatalf("missing %v, want %v", got, want)
	}
	names, err := ruleMetrics(alertRules, serviceMetric)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"timeoutd_overdue_timeouts", "timeoutd_partitions_owned", "orders_reconciled_total", "timeoutd_batch_size_bucket"} {
		if !slices.Contains(names, n) {
			t.Errorf("the rules' metrics %v lack %s", names, n)
		}
	}
}

// checkAlertMetrics fails t unless every metric the alert rules name is
// served by the services of s. A labelled counter appears once it counted
// something: call it after a dead letter and a cancellation.
func checkAlertMetrics(t *testing.T, s *stack) {
	t.Helper()
	names, err := ruleMetrics(alertRules, serviceMetric)
	if err != nil {
		t.Fatal(err)
	}
	var pages strings.Builder
	hc := &http.Client{Timeout: 5 * time.Second}
	for _, url := range []string{s.TimeoutdURL, s.OrdersURL} {
		resp, err := hc.Get(url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s/metrics: %d %v", url, resp.StatusCode, err)
		}
		fmt.Fprintln(&pages, string(body))
	}
	if missing := missingMetrics(pages.String(), names); len(missing) > 0 {
		t.Fatalf("%s names metrics the services do not serve: %v", alertRules, missing)
	}
}

// checkPatroniAlertMetrics fails t unless every Patroni metric the alert
// rules name is served by each member of the Postgres cluster of s.
func checkPatroniAlertMetrics(t *testing.T, s *stack) {
	t.Helper()
	names, err := ruleMetrics(alertRules, patroniMetric)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatalf("%s names no Patroni metric", alertRules)
	}
	for _, name := range s.PGNodes {
		page, err := s.execOutput(t.Context(), name, "curl", "-fsS", "--max-time", "5", "http://127.0.0.1:8008/metrics")
		if err != nil {
			t.Fatal(err)
		}
		if missing := missingMetrics(page, names); len(missing) > 0 {
			t.Fatalf("%s names metrics that Patroni on %s does not serve: %v", alertRules, name, missing)
		}
	}
}
