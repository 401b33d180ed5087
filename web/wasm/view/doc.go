// Package view is the dashboard's view model in plain Go: the state built
// from timeoutd's snapshots (api.Snapshot), the reducers that apply
// snapshots, connection changes and browsed pages to it, the text
// formatting of countdowns, rates and ages, and the geometry of the SVG
// charts. It has no dependency on syscall/js, so its tests run natively;
// web/wasm's main package only renders what this package computes.
//
// Nothing here reads the clock: every function that depends on time takes
// the current instant as an argument.
package view
