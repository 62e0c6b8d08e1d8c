package otelidem

import (
	"runtime/debug"
	"strings"
	"sync"
)

// Version is the version of this module, as the program was built with it
// ("0.1.0"), which New reports as the instrumentation version of its
// tracer and meter. It is "devel" in a build from a working tree.
func Version() string { return version() }

var version = sync.OnceValue(func() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return moduleVersion(info)
})

// moduleVersion is this module's version in info, without its leading "v".
func moduleVersion(info *debug.BuildInfo) string {
	mods := append([]*debug.Module{&info.Main}, info.Deps...)
	for _, m := range mods {
		if m.Path != ScopeName {
			continue
		}
		if m.Replace != nil {
			m = m.Replace
		}
		if m.Version == "" || m.Version == "(devel)" {
			return "devel"
		}
		return strings.TrimPrefix(m.Version, "v")
	}
	return "devel"
}
