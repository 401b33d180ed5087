package postgres

// ReconcileSQL is the reconciler's locking query, for the query plan test.
const ReconcileSQL = reconcileSQL
