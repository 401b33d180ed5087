package migrate

// LockID is the key of the lock Up holds, for the tests.
const LockID = lockID
