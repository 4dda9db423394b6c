// Package poduid knows kubelet's pod UID format. It is a leaf: nodefs and
// podcgroups both parse UIDs out of names on disk and must agree exactly on
// what a UID is, since a name that does not parse is never touched.
package poduid

// Valid reports whether s is a pod UID kubelet can have produced: an API
// server UUID (8-4-4-4-12 lowercase hex) or a static pod's md5 (32 lowercase
// hex). Uppercase is rejected: neither source ever produces it.
func Valid(s string) bool {
	switch len(s) {
	case 32:
		for i := 0; i < len(s); i++ {
			if !isLowerHex(s[i]) {
				return false
			}
		}
		return true
	case 36:
		for i := 0; i < len(s); i++ {
			switch i {
			case 8, 13, 18, 23:
				if s[i] != '-' {
					return false
				}
			default:
				if !isLowerHex(s[i]) {
					return false
				}
			}
		}
		return true
	}
	return false
}

func isLowerHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' }
