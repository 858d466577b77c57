package ferry

import "runtime/debug"

// version may be set at link time: -ldflags "-X github.com/ferryq/ferry.version=v1.2.3".
var version string

// Version is this build's version: the link-time value, else the main
// module's version (a tag, or a pseudo-version with the VCS revision), else
// "devel".
func Version() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			return bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return "devel+" + s.Value[:12]
			}
		}
	}
	return "devel"
}
