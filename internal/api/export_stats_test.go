package api

// BatchWindow is batchWindow, for the table test in stats_test.go.
var BatchWindow = batchWindow
