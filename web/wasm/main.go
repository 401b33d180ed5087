//go:build js && wasm

// Command wasm is timeoutd's operator dashboard, compiled to WebAssembly
// (GOOS=js GOARCH=wasm) and served with index.html, app.css, boot.js and the
// toolchain's wasm_exec.js from web/wasm/dist (make wasm). It builds the page
// in the element #app, follows /api/v1/stream through EventSource and
// renders what package view computes; it is read-only unless timeoutd
// enables the operator actions (extend, cancel).
package main

import (
	"syscall/js"
	"time"
)

func main() {
	a, err := newApp(js.Global(), time.Now)
	if err != nil {
		js.Global().Get("console").Call("error", "dashboard: "+err.Error())
		return
	}
	a.start()
	select {} // callbacks run the page from here on
}
