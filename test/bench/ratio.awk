# ratio.awk: medians of `go test -bench -count N` lines, and how each
# benchmark family scales from its 10k to its 20k variant.
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
		big = name
		if (!sub(/10k/, "20k", big) || !(big in m)) continue
		family = name
		sub(/10k/, "N", family)
		sub(/-[0-9]+$/, "", family)
		printf "%-30s 20k/10k = %.2fx\n", family, m[big] / m[name]
	}
}
