package podnet

import (
	"math/rand"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/utils"
)

// TestPlainNameIsLibcnisLanguage: plainName accepts exactly the names
// libcni's validators accept, so validID and validNetworkName answer as
// libcni does, with or without running its regular expression.
func TestPlainNameIsLibcnisLanguage(t *testing.T) {
	names := []string{"", "a", "Z", "0", "_", ".", "-", "a_", "a.", "a-", "_a", ".a", "-a", "a b", "a/b", "a:b", "a\n", "\na",
		"a\x00", "é", "aé", "a\xff", strings.Repeat("f", 64), "0b3c2a7e-54a4-4a4d-9b1e-0c6f8f1e2a3b", "cni-loopback", "k8s-pod-network",
		"a..b", "a--b", "A_B.c-9"}
	const alphabet = "aZ09_.-/: \t\n\x00\x7f\xc3\xa9\xff"
	rng := rand.New(rand.NewSource(1))
	for range 20000 {
		b := make([]byte, rng.Intn(8))
		for i := range b {
			b[i] = alphabet[rng.Intn(len(alphabet))]
		}
		names = append(names, string(b))
	}
	for _, name := range names {
		libcniID, libcniNet := utils.ValidateContainerID(name) == nil, utils.ValidateNetworkName(name) == nil
		if got := plainName(name); got != libcniID || got != libcniNet {
			t.Fatalf("plainName(%q) = %v, libcni accepts it as a container ID: %v, as a network name: %v", name, got, libcniID, libcniNet)
		}
		if got := validID(name) == ""; got != libcniID {
			t.Fatalf("validID(%q) accepts it: %v, libcni: %v", name, got, libcniID)
		}
		if got := validNetworkName(name) == ""; got != libcniNet {
			t.Fatalf("validNetworkName(%q) accepts it: %v, libcni: %v", name, got, libcniNet)
		}
	}
}
