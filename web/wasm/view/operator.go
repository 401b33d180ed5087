package view

import (
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Action is an operator action on a pending order, offered when timeoutd
// has an operator token (api.Stats.OperatorActions).
type Action string

// The operator actions; each value is the last segment of its API path.
const (
	// Extend moves the order's payment deadline (the orders API's
	// POST /v1/orders/{id}/extend with pay_within).
	Extend Action = "extend"
	// Cancel cancels the order (POST /v1/orders/{id}/cancel).
	Cancel Action = "cancel"
)

// Operator constants of the page.
const (
	// ExtendDefault is the pay_within the extend prompt proposes.
	ExtendDefault = "15m"
	// TokenStorageKey is the sessionStorage key of the operator token: it
	// lives as long as the tab, never in localStorage or a URL.
	TokenStorageKey = "ordertimeout.operator-token"
	// TokenPrompt labels the password field asking for the operator token.
	TokenPrompt = "Operator token (kept in this tab only)"
)

// OperatorEnabled reports whether the pending rows offer operator actions.
func (s *State) OperatorEnabled() bool { return s.Stats.OperatorActions }

// Label is the button's text.
func (a Action) Label() string {
	if a == Extend {
		return "Extend"
	}
	return "Cancel"
}

// AriaLabel is the accessible name of the button of the order key.
func (a Action) AriaLabel(key string) string {
	if a == Extend {
		return "Extend the payment deadline of order " + key
	}
	return "Cancel order " + key
}

// Question is the confirmation asked before a on the order key; Extend's
// is a prompt whose answer is the new pay_within (proposed: ExtendDefault).
func (a Action) Question(key string) string {
	if a == Extend {
		return "Extend order " + key + ": the customer may pay within (e.g. 15m, 2h) from now:"
	}
	return "Cancel order " + key + "? Its customer can no longer pay it."
}

// Sending is the status line while a's request on key is in flight.
func (a Action) Sending(key string) string { return a.Label() + " " + key + ": sending…" }

// NeedsToken is the status line while the token form waits for the
// operator token that a on key needs.
func (a Action) NeedsToken(key string) string {
	return a.Label() + " " + key + ": enter the operator token to send it"
}

// NotSent is the status line when the operator gave up before a was sent
// (why says how).
func (a Action) NotSent(key, why string) string { return a.Label() + " " + key + " not sent: " + why }

// ActionRequest is the call to timeoutd's operator route.
type ActionRequest struct {
	// URL is the route, e.g. /api/v1/orders/o-1/cancel; the method is POST.
	URL string
	// Body is the JSON body, empty for Cancel.
	Body string
}

// BuildAction returns the request for a on the order key; for Extend,
// payWithin is the operator's answer, a positive Go duration. The error is
// the message to show.
func BuildAction(a Action, key, payWithin string) (ActionRequest, error) {
	req := ActionRequest{URL: "/api/v1/orders/" + url.PathEscape(key) + "/" + string(a)}
	if a != Extend {
		return req, nil
	}
	payWithin = strings.TrimSpace(payWithin)
	if d, err := time.ParseDuration(payWithin); err != nil || d <= 0 {
		return ActionRequest{}, &actionError{"“" + payWithin + "” is not a duration such as 15m or 2h"}
	}
	b, _ := json.Marshal(map[string]string{"pay_within": payWithin})
	req.Body = string(b)
	return req, nil
}

type actionError struct{ msg string }

func (e *actionError) Error() string { return e.msg }

// Result is what an operator action's answer means for the page.
type Result struct {
	// Text is the status line.
	Text string
	// OK is true when the orders API applied the action.
	OK bool
	// ForgetToken is true when timeoutd refused the operator token, so the
	// page drops it and asks again next time.
	ForgetToken bool
}

// ActionResult interprets timeoutd's answer (status and body) to a on key;
// status 0 means the request failed without an answer.
func ActionResult(a Action, key string, status int, body string) Result {
	switch {
	case status == 0:
		return Result{Text: a.Label() + " " + key + " failed: timeoutd is unreachable"}
	case status == 200 && a == Extend:
		var o struct {
			PayBy time.Time `json:"pay_by"`
		}
		text := "Order " + key + " extended"
		if json.Unmarshal([]byte(body), &o) == nil && !o.PayBy.IsZero() {
			text += "; pay by " + o.PayBy.UTC().Format("2006-01-02 15:04:05") + " UTC"
		}
		return Result{Text: text, OK: true}
	case status == 200:
		return Result{Text: "Order " + key + " cancelled", OK: true}
	case status == 401:
		return Result{Text: a.Label() + " " + key + " failed: the operator token was refused; it will be asked again", ForgetToken: true}
	default:
		text := a.Label() + " " + key + " failed: " + Problem(status, body)
		// The orders API's validation problems name the fields in
		// "errors" only (its detail is generic).
		var p struct {
			Errors []struct{ Field, Reason string }
		}
		if json.Unmarshal([]byte(body), &p) == nil {
			for _, e := range p.Errors {
				text += "; " + e.Field + " " + e.Reason
			}
		}
		return Result{Text: text}
	}
}

// Problem formats an error answer of timeoutd (or of the orders API it
// relays) with its problem+json detail, or title, if any.
func Problem(status int, body string) string {
	var p struct{ Title, Detail string }
	msg := "timeoutd answered " + strconv.Itoa(status)
	if json.Unmarshal([]byte(body), &p) != nil {
		return msg
	}
	switch {
	case p.Detail != "":
		msg += ": " + p.Detail
	case p.Title != "":
		msg += ": " + p.Title
	}
	return msg
}
