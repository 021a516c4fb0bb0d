package bench

// Summarize is summarize, for the table test of percentiles.
var Summarize = summarize

// ThreadSwitches is threadSwitches, for its test against this process.
var ThreadSwitches = threadSwitches
