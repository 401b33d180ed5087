//go:build js && wasm

package main

import "syscall/js"

const svgNS = "http://www.w3.org/2000/svg"

// elem creates an HTML element with attributes given as name, value pairs
// (attrs) and children that are elements or strings (text nodes).
func elem(doc js.Value, tag string, attrs []string, kids ...any) js.Value {
	return build(doc.Call("createElement", tag), doc, attrs, kids)
}

// svgElem creates an SVG element like elem.
func svgElem(doc js.Value, tag string, attrs []string, kids ...any) js.Value {
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

// attrs lists an element's attributes as name, value pairs.
func attrs(pairs ...string) []string { return pairs }

// replaceChildren replaces el's children by kids.
func replaceChildren(el js.Value, kids []any) {
	el.Call("replaceChildren", kids...)
}

// fit grows or shrinks a table body's rows to n, appending the rows newRow
// builds and removing the last ones (tr is a row's element), so the table
// is updated in place.
func fit[R any](body js.Value, rows []R, n int, newRow func() R, tr func(R) js.Value) []R {
	for len(rows) < n {
		r := newRow()
		body.Call("appendChild", tr(r))
		rows = append(rows, r)
	}
	for len(rows) > n {
		body.Call("removeChild", tr(rows[len(rows)-1]))
		rows = rows[:len(rows)-1]
	}
	return rows
}

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
		fn(firstArg(args))
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
		ok(firstArg(args))
		return nil
	})
	failF = js.FuncOf(func(_ js.Value, args []js.Value) any {
		done()
		fail(firstArg(args))
		return nil
	})
	p.Call("then", okF, failF)
}

// timeout calls fn once after ms milliseconds, like setTimeout.
func timeout(win js.Value, ms int, fn func()) js.Value {
	var f js.Func
	f = js.FuncOf(func(js.Value, []js.Value) any {
		f.Release()
		fn()
		return nil
	})
	return win.Call("setTimeout", f, ms)
}

// firstArg is a callback's first argument, or undefined.
func firstArg(args []js.Value) js.Value {
	if len(args) == 0 {
		return js.Undefined()
	}
	return args[0]
}
