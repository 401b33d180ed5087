//go:build js && wasm

package main

import "syscall/js"

const svgNS = "http://www.w3.org/2000/svg"

// h creates an HTML element with attributes given as name, value pairs and
// children that are elements or strings (text nodes).
func h(doc js.Value, tag string, attrs []string, kids ...any) js.Value {
	return build(doc.Call("createElement", tag), doc, attrs, kids)
}

// s creates an SVG element like h.
func s(doc js.Value, tag string, attrs []string, kids ...any) js.Value {
	return build(doc.Call("createElementNS", svgNS, tag), doc, attrs, kids)
}

func build(el, doc js.Value, attrs []string, kids []any) js.Value {
	for i := 0; i+1 < len(attrs); i += 2 {
		el.Call("setAttribute", attrs[i], attrs[i+1])
	}
	for _, k := range kids {
		switch k := k.(type) {
		case js.Value:
			el.Call("appendChild", k)
		case string:
			el.Call("appendChild", doc.Call("createTextNode", k))
		}
	}
	return el
}

// a is shorthand for an attribute list.
func a(pairs ...string) []string { return pairs }

// text is an element's text content, written to the DOM only on change.
type text struct {
	el  js.Value
	cur string
	set bool
}

func (t *text) Set(v string) {
	if t.set && v == t.cur {
		return
	}
	t.el.Set("textContent", v)
	t.cur, t.set = v, true
}

// attr is an element's attribute, written to the DOM only on change.
type attr struct {
	el   js.Value
	name string
	cur  string
	set  bool
}

func (t *attr) Set(v string) {
	if t.set && v == t.cur {
		return
	}
	t.el.Call("setAttribute", t.name, v)
	t.cur, t.set = v, true
}

// listen adds an event listener and returns its function, to release.
func listen(el js.Value, event string, fn func(ev js.Value)) js.Func {
	f := js.FuncOf(func(_ js.Value, args []js.Value) any {
		var ev js.Value
		if len(args) > 0 {
			ev = args[0]
		}
		fn(ev)
		return nil
	})
	el.Call("addEventListener", event, f)
	return f
}

// then runs ok or fail when promise p settles, releasing both functions.
func then(p js.Value, ok, fail func(v js.Value)) {
	var okF, failF js.Func
	done := func() { okF.Release(); failF.Release() }
	okF = js.FuncOf(func(_ js.Value, args []js.Value) any {
		done()
		ok(arg0(args))
		return nil
	})
	failF = js.FuncOf(func(_ js.Value, args []js.Value) any {
		done()
		fail(arg0(args))
		return nil
	})
	p.Call("then", okF, failF)
}

// timeout calls fn once after d milliseconds, like setTimeout.
func timeout(win js.Value, ms int, fn func()) js.Value {
	var f js.Func
	f = js.FuncOf(func(js.Value, []js.Value) any {
		f.Release()
		fn()
		return nil
	})
	return win.Call("setTimeout", f, ms)
}

func arg0(args []js.Value) js.Value {
	if len(args) == 0 {
		return js.Undefined()
	}
	return args[0]
}
