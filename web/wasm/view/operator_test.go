package view

import (
	"testing"

	"github.com/ordertimeout/ordertimeout/services/timeoutd/api"
)

func TestOperatorEnabled(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		snaps []api.Snapshot
		want  bool
	}{
		{"before any snapshot", nil, false},
		{"read-only timeoutd", []api.Snapshot{{Stats: api.Stats{Now: t0}}}, false},
		{"operator token configured", []api.Snapshot{{Stats: api.Stats{Now: t0, OperatorActions: true}}}, true},
		{"token removed on restart", []api.Snapshot{{Stats: api.Stats{Now: t0, OperatorActions: true}}, {Stats: api.Stats{Now: t0}}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var s State
			for _, snap := range tt.snaps {
				s.ApplySnapshot(snap, t0)
			}
			if got := s.OperatorEnabled(); got != tt.want {
				t.Fatalf("OperatorEnabled = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestBuildAction(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		action    Action
		key, in   string
		want      ActionRequest
		wantError string
	}{
		{name: "cancel has no body", action: Cancel, key: "o-1", want: ActionRequest{URL: "/api/v1/orders/o-1/cancel"}},
		{name: "extend sends pay_within", action: Extend, key: "o_2", in: " 2h ", want: ActionRequest{URL: "/api/v1/orders/o_2/extend", Body: `{"pay_within":"2h"}`}},
		{name: "extend default", action: Extend, key: "o-3", in: ExtendDefault, want: ActionRequest{URL: "/api/v1/orders/o-3/extend", Body: `{"pay_within":"15m"}`}},
		{name: "key is escaped", action: Cancel, key: "a/b", want: ActionRequest{URL: "/api/v1/orders/a%2Fb/cancel"}},
		{name: "extend refuses a non-duration", action: Extend, key: "o-1", in: "tomorrow", wantError: "“tomorrow” is not a duration such as 15m or 2h"},
		{name: "extend refuses zero", action: Extend, key: "o-1", in: "0s", wantError: "“0s” is not a duration such as 15m or 2h"},
		{name: "extend refuses a negative duration", action: Extend, key: "o-1", in: "-5m", wantError: "“-5m” is not a duration such as 15m or 2h"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := BuildAction(tt.action, tt.key, tt.in)
			if tt.wantError != "" {
				if err == nil || err.Error() != tt.wantError {
					t.Fatalf("err = %v, want %q", err, tt.wantError)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("BuildAction = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestActionResult(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		action Action
		status int
		body   string
		want   Result
	}{
		{"cancelled", Cancel, 200, `{"id":"o-1","status":"cancelled"}`, Result{Text: "Order o-1 cancelled", OK: true}},
		{"extended with the new deadline", Extend, 200, `{"id":"o-1","pay_by":"2026-11-23T06:15:00.5Z"}`,
			Result{Text: "Order o-1 extended; pay by 2026-11-23 06:15:00 UTC", OK: true}},
		{"extended, answer without pay_by", Extend, 200, `not json`, Result{Text: "Order o-1 extended", OK: true}},
		{"illegal transition shows the detail", Cancel, 409, `{"title":"conflict","status":409,"detail":"order o-1 is paid"}`,
			Result{Text: "Cancel o-1 failed: timeoutd answered 409: order o-1 is paid"}},
		{"title when no detail", Extend, 400, `{"title":"invalid request","status":400}`,
			Result{Text: "Extend o-1 failed: timeoutd answered 400: invalid request"}},
		{"orders unreachable", Cancel, 502, `{"title":"orders API unreachable","detail":"the orders API did not answer"}`,
			Result{Text: "Cancel o-1 failed: timeoutd answered 502: the orders API did not answer"}},
		{"validation names the fields", Extend, 400, `{"title":"validation","status":400,"detail":"orders: invalid request","errors":[{"field":"pay_within","reason":"must be at most 24h"}]}`,
			Result{Text: "Extend o-1 failed: timeoutd answered 400: orders: invalid request; pay_within must be at most 24h"}},
		{"no answer", Cancel, 0, "", Result{Text: "Cancel o-1 failed: timeoutd is unreachable"}},
		{"not problem json", Cancel, 500, `<html>`, Result{Text: "Cancel o-1 failed: timeoutd answered 500"}},
		{"token refused is forgotten", Cancel, 401, `{"title":"unauthorized"}`,
			Result{Text: "Cancel o-1 failed: the operator token was refused; it will be asked again", ForgetToken: true}},
		{"disabled since the page loaded", Extend, 404, `{"title":"operator actions disabled","detail":"timeoutd has no TIMEOUTD_OPERATOR_TOKEN"}`,
			Result{Text: "Extend o-1 failed: timeoutd answered 404: timeoutd has no TIMEOUTD_OPERATOR_TOKEN"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := ActionResult(tt.action, "o-1", tt.status, tt.body); got != tt.want {
				t.Fatalf("ActionResult = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestActionTexts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                  string
		action                Action
		label, aria, question string
		sending, notSent      string
	}{
		{"extend", Extend, "Extend", "Extend the payment deadline of order o-1", "Extend order o-1: the customer may pay within (e.g. 15m, 2h) from now:",
			"Extend o-1: sending…", "Extend o-1 not sent: why"},
		{"cancel", Cancel, "Cancel", "Cancel order o-1", "Cancel order o-1? Its customer can no longer pay it.",
			"Cancel o-1: sending…", "Cancel o-1 not sent: why"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.action.Label(); got != tt.label {
				t.Errorf("Label = %q, want %q", got, tt.label)
			}
			if got := tt.action.AriaLabel("o-1"); got != tt.aria {
				t.Errorf("AriaLabel = %q, want %q", got, tt.aria)
			}
			if got := tt.action.Question("o-1"); got != tt.question {
				t.Errorf("Question = %q, want %q", got, tt.question)
			}
			if got := tt.action.Sending("o-1"); got != tt.sending {
				t.Errorf("Sending = %q, want %q", got, tt.sending)
			}
			if got := tt.action.NotSent("o-1", "why"); got != tt.notSent {
				t.Errorf("NotSent = %q, want %q", got, tt.notSent)
			}
		})
	}
}
