package bench

// Summarize is summarize, for the table test of percentiles.
var Summarize = summarize

// PrefixFractions is prefixFractions, for its table test.
var PrefixFractions = prefixFractions
