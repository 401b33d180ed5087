//go:build js && wasm

package main

import (
	"strconv"
	"strings"
	"syscall/js"

	"github.com/ordertimeout/ordertimeout/web/wasm/view"
)

// actions are the operator actions, in the order of their buttons.
var actions = []view.Action{view.Extend, view.Cancel}

// onRowClick runs the operator action of the button clicked in the
// pending table (one listener for all rows).
func (ap *app) onRowClick(ev js.Value) {
	target := ev.Get("target")
	if target.IsUndefined() || target.IsNull() || target.Get("getAttribute").IsUndefined() {
		return
	}
	act, key := target.Call("getAttribute", "data-action"), target.Call("getAttribute", "data-key")
	if act.IsNull() || key.IsNull() || !ap.state.OperatorEnabled() {
		return
	}
	ap.operate(view.Action(act.String()), key.String())
}

// operate confirms act on the order key with the operator, asks for the
// operator token unless this tab has it, sends the request and shows the
// outcome in the status line.
func (ap *app) operate(act view.Action, key string) {
	var payWithin string
	if act == view.Extend {
		ans := ap.win.Call("prompt", act.Question(key), view.ExtendDefault)
		if ans.IsNull() || ans.IsUndefined() {
			ap.opStatusSet(act.NotSent(key, "not confirmed"), false)
			return
		}
		payWithin = ans.String()
	} else if !ap.win.Call("confirm", act.Question(key)).Truthy() {
		ap.opStatusSet(act.NotSent(key, "not confirmed"), false)
		return
	}
	req, err := view.BuildAction(act, key, payWithin)
	if err != nil {
		ap.opStatusSet(act.NotSent(key, err.Error()), false)
		return
	}
	ap.withToken(act, key, func(token string) {
		if token == "" {
			ap.opStatusSet(act.NotSent(key, "no operator token"), false)
			return
		}
		ap.send(act, key, req, token)
	})
}

// send sends the operator action's request with the operator token and
// shows the outcome in the status line.
func (ap *app) send(act view.Action, key string, req view.ActionRequest, token string) {
	headers := js.Global().Get("Object").New()
	headers.Set("Accept", "application/json, application/problem+json")
	headers.Set("Authorization", "Bearer "+token)
	opts := js.Global().Get("Object").New()
	opts.Set("method", "POST")
	opts.Set("headers", headers)
	if req.Body != "" {
		headers.Set("Content-Type", "application/json")
		opts.Set("body", req.Body)
	}
	ap.opStatusSet(act.Sending(key), false)
	done := func(status int, body string) {
		res := view.ActionResult(act, key, status, body)
		if res.ForgetToken {
			ap.win.Get("sessionStorage").Call("removeItem", view.TokenStorageKey)
		}
		ap.opStatusSet(res.Text, res.OK)
	}
	then(ap.win.Call("fetch", req.URL, opts), func(resp js.Value) {
		status := resp.Get("status").Int()
		then(resp.Call("text"), func(body js.Value) { done(status, body.String()) },
			func(js.Value) { done(status, "") })
	}, func(js.Value) { done(0, "") })
}

// withToken calls then with the operator token kept in sessionStorage, or
// asks for it (once per tab) in the token form, a password field, and
// calls then with the answer ("" when the operator gives none). A later
// action asking while the form is open takes the form over.
func (ap *app) withToken(act view.Action, key string, then func(token string)) {
	if v := ap.win.Get("sessionStorage").Call("getItem", view.TokenStorageKey); !v.IsNull() && v.String() != "" {
		then(v.String())
		return
	}
	ap.tokenWait = then
	ap.opStatusSet(act.NeedsToken(key), false)
	ap.tokenForm.Set("hidden", false)
	if focus := ap.tokenInput.Get("focus"); focus.Type() == js.TypeFunction {
		ap.tokenInput.Call("focus")
	}
}

// tokenGiven closes the token form with the operator's answer, keeps a
// non-empty token in sessionStorage and resumes the waiting action.
func (ap *app) tokenGiven(answer string) {
	ap.tokenInput.Set("value", "")
	ap.tokenForm.Set("hidden", true)
	then := ap.tokenWait
	ap.tokenWait = nil
	if then == nil {
		return
	}
	token := strings.TrimSpace(answer)
	if token != "" {
		ap.win.Get("sessionStorage").Call("setItem", view.TokenStorageKey, token)
	}
	then(token)
}

// opStatusSet shows msg in the operator status line.
func (ap *app) opStatusSet(msg string, ok bool) {
	ap.opText.Set(msg)
	ap.opOK.Set(strconv.FormatBool(ok))
}
