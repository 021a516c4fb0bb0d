package bench

// Summarize is summarize, for the table test of percentiles.
var Summarize = summarize
