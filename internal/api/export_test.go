package api

// Resyncs reports how many lagged log subscriptions were resynchronized.
func Resyncs() int64 { return resyncs.Load() }
