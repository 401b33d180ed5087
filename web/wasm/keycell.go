//go:build js && wasm

package main

import (
	"syscall/js"

	"github.com/ordertimeout/ordertimeout/web/wasm/view"
)

// keyCell is the row header holding an order id: the whole id, and an
// abbreviation (view.ShortKey, the id's tail) that CSS shows instead where
// columns are narrow, the whole id staying readable by screen readers and
// as a tooltip.
type keyCell struct {
	th          js.Value
	full, short text
	class       attr
	title       attr
}

func newKeyCell(d js.Value) keyCell {
	full := elem(d, "span", attrs("class", "k-full"))
	short := elem(d, "span", attrs("class", "k-short", "aria-hidden", "true"))
	th := elem(d, "th", attrs("scope", "row"), full, short)
	return keyCell{th: th, full: text{el: full}, short: text{el: short},
		class: attr{el: th, name: "class"}, title: attr{el: th, name: "title"}}
}

// Set shows key.
func (k *keyCell) Set(key string) {
	k.full.Set(key)
	k.title.Set(key)
	if sk := view.ShortKey(key); sk != key {
		k.short.Set(sk)
		k.class.Set("key abbr")
		return
	}
	k.short.Set("")
	k.class.Set("key")
}
