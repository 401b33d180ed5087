// Package daemon wires timeoutd's adapters into one runnable [Main]: the
// binary services/timeoutd/cmd/timeoutd runs it from the environment
// ([FromEnv]), and end-to-end tests and benchmarks run the same value
// in-process. It is the only package that imports every adapter.
package daemon
