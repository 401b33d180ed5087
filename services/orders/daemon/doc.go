// Package daemon wires the orders service's adapters into one runnable
// [Main]: the binary services/orders/cmd/orders runs it from the
// environment ([FromEnv]), and tests run the same value in-process (New,
// then Run in a goroutine). It is the only package that imports every
// adapter.
package daemon
