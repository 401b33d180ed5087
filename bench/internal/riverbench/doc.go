// Package riverbench drives River (github.com/riverqueue/river), the Go +
// Postgres job queue timeoutd is measured against, with the timeoutd
// workloads: InsertMany of future jobs at given deadlines, JobCancel of them,
// Postgres bytes per pending job, and an expiry storm with a no-op worker
// that records how late each job started against its scheduled_at.
//
// River lives only in the bench module, so it never enters the services'
// dependencies.
package riverbench
