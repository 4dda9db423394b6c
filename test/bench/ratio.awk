# ratio.awk: medians of `go test -bench -count N` lines, and how each
# benchmark family scales per doubling of its size (NkPods -> 2NkPods;
# 1.00x per doubling is constant time, 2.00x is linear).
#
#   go test -run '^$' -bench 'Plan|ReadPods' -count 5 ./gc/ | awk -f test/bench/ratio.awk
/^Benchmark/ {
	name = $1
	if (!(name in n)) order[++names] = name
	ns[name] = ns[name] " " $3
	n[name]++
}
function median(list, count,    a, i, j, t) {
	split(substr(list, 2), a, " ")
	for (i = 1; i <= count; i++)
		for (j = i + 1; j <= count; j++)
			if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
	return count % 2 ? a[(count + 1) / 2] : (a[count / 2] + a[count / 2 + 1]) / 2
}
END {
	for (i = 1; i <= names; i++) {
		name = order[i]
		m[name] = median(ns[name], n[name])
		printf "%-30s median %9.3f ms of %d runs\n", name, m[name] / 1e6, n[name]
	}
	for (i = 1; i <= names; i++) {
		name = order[i]
		if (!match(name, /[0-9]+k/)) continue
		size = substr(name, RSTART, RLENGTH - 1)
		big = substr(name, 1, RSTART - 1) (2 * size) "k" substr(name, RSTART + RLENGTH)
		if (!(big in m)) continue
		family = substr(name, 1, RSTART - 1) "N" substr(name, RSTART + RLENGTH - 1)
		sub(/-[0-9]+$/, "", family)
		printf "%-30s %3dk -> %3dk: %.2fx\n", family, size, 2 * size, m[big] / m[name]
	}
}
