package release

// BreakAllowed is breakAllowed, for the tests.
var BreakAllowed = breakAllowed
