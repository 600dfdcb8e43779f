// Package attribution tells where the time of units of work went and what a
// change is worth: for each row (component, phase, direction:
// "ipc.send/request") its share q of end-to-end time on the critical path
// and its naive share; for an A/B pair of runs, each row's own improvement
// r, the end-to-end gain predicted for the change's target rows, and the
// measured gain, each with a bootstrap interval, and a verdict in words.
//
// # Input
//
// Spans from any source, in package spans' model: a span processor or
// recorder in process (otelsetup.SpanOf, SpansOf), or OTLP JSON trace files written by amdahl or by the
// OpenTelemetry Collector's file exporter (ReadFile, Read; package spans' ReadOTLPJSON:
// streamed, one line or many of any length, compact spans with interned
// strings). A unit of work is a unit span with no unit span above it, and
// every span reachable from it through parent ids (Trees). Which spans
// are units is Input.Units: amdahl.work spans, every trace's root (a
// trace whose root is missing has its topmost span stand in), or the
// spans a selector on name, kind, service.name and attributes matches;
// by default amdahl.work when the input has one, else roots. A span's row
// comes from a rule set (Input.Rows, rules.go): amdahl's attributes,
// OpenTelemetry's semantic conventions (service, span kind, rpc.*,
// http.*, db.*, messaging.*), or a rules file (ParseRules); by default
// amdahl's when any span carries them, else the conventions'.
// Input is taken as it comes and every anomaly is counted in Diagnostics,
// never dropped silently:
//
//   - spans are deduplicated by (trace id, span id): a trace exported
//     twice counts once;
//   - an orphan (its parent is not in the input) is attached to the unit of
//     its trace when that unit's root is known;
//   - an amdahl.work inside another unit is a phase-less child of the outer
//     unit, not a second unit;
//   - parent chains that loop, or run deeper than MaxTreeDepth, are left
//     out and counted;
//   - malformed input is an error naming the file and line; Limits bound
//     spans, string lengths and nesting;
//   - a span with hostile timestamps (a missing or zero start or end, an
//     end before its start, longer than MaxSpanDuration, a time from 2262
//     on) is left out, its children hung under its parent; a unit whose
//     root is one is left out whole; sums of durations are checked, a
//     unit that would overflow one left out and counted.
//
// # Critical path and q
//
// The walk is the last-finishing-child walk of Jaeger's UI and Uber's
// CRISP: walking back from the end of a span, the child that finished last
// (before the cursor) is on the path, the gap after it is the parent's own
// time, and the walk continues from that child's start. Children are
// clipped to their parent (Diagnostics.Outside counts those cut). A span
// without a phase (gRPC spans, runtime.host, chunking.send.chunk, a
// nested amdahl.work) counts toward its nearest phase ancestor, or
// "other" when it has none. The exclusive critical times of a unit add
// up to its duration exactly, so
//
//	q(row) = Σ critical time of the row / Σ e2e     (over units; Σ q = 1)
//	naive(row) = Σ span durations of the row / Σ e2e (≥ q where spans overlap)
//
// Flame keeps where on the path each part of that time was, as CRISP
// summarises critical paths: each piece of critical time is filed under
// the stack of phase rows that enclose it (runtime.dispatch, then
// runtime.queue inside it, …), summed over units into a FlameGraph whose
// frames of a row add up to the row's critical time (report.html draws
// it).
//
// # Two clocks
//
// Spans measured in another process (amdahl.remote=true, or a span whose
// resource differs from its parent's: a CLIENT→SERVER or
// PRODUCER→CONSUMER pair across services) carry that process's clock. A
// far span under a send of no direction (a CLIENT span) that fits in it
// is the send's inside, placed within its window (the call's far side);
// one longer than the send happened after it (the send was the request
// only) and is placed like amdahl's far sides. They
// are placed causally before the walk: the far side's spans under a
// near-side parent form a group that happened after the near request's
// send began and before the near reply's receive ended. The group is
// moved as a whole, its descendants with it, by the smallest shift that
// puts it
//
//  1. between the end of the near request spans and the start of the near
//     reply spans, when it fits there (the usual case: a message leaves,
//     is worked on, comes back);
//  2. else within the hard bounds: after the near request send began,
//     before the near reply receive ended (a pipelined transfer, where the
//     far side reads while the near side still writes).
//
// No shift when the bounds already hold. Then a near request span that
// still reaches past the group's start is cut there, and a near reply span
// that starts before the group's end starts at it: a send whose end was
// recorded late (the writer was descheduled after the far side had its
// bytes) no longer hides the far side — and in a pipelined transfer, where
// the far side starts reading while the near side still writes, the
// overlap goes to the far side's receive (so a change to the pipe should
// target both: amdahl ab's ipc target includes taskhost.receive). A far
// span whose parent is a near send span is placed as the send's sibling; a
// third process under a far span is placed within that span's window the
// same way. A parent with several round trips (a request after a reply)
// is walked as recorded: which far span belongs to which trip cannot be
// told from clocks that may disagree (Diagnostics.Unplaced).
//
// Worked example (ms; the host's clock 2 ms behind the parent's):
//
//	parent: ipc.send/request 3–8, ipc.receive/reply 15.8–16.5
//	host as recorded: receive 6.3–6.8, deserialize 6.8–7.5, execute 7.5–13, serialize 13–13.5
//
// The host's group is 6.3–13.5 (7.2 ms); the window between the send's end
// and the reply's start is 8–15.8 (7.8 ms): it fits, and the smallest
// shift is +1.7 ms, giving 8–15.2. Walked as recorded, the host's receive
// would start before the send ended, and the whole send (5 ms, 25 % of
// the unit) would fall off the path and be booked as "other"; placed, the
// send keeps its 5 ms and every row's q equals the skew-free trace's: the
// gaps inside the window are the host span's own time either way
// (TestSkewedFarSideKeepsItsPhases, skews from -5 to +5 ms).
//
// # A/B: r, the prediction and the measurement
//
// For a baseline B and a candidate C (Compare), with target rows T (the
// rows the change is about: --target, or derived from the settings that
// differ):
//
//	q(row)   from B's critical path only
//	r(row)   = 1 - own(C) / own(B), where own is the row's own work per
//	           unit: the sum of its span durations over the units (mean
//	           span duration × spans per unit). It equals the ratio of mean
//	           span durations while a change keeps the spans per unit, and
//	           stays right when it does not (fewer, larger chunks or
//	           packets). Means, not medians: e2e is a mean, and a median
//	           would ignore the tail that a buffer change moves
//	first order = Σ over T of q·r
//	replay   = 1 - mean replayed e2e / mean e2e over B's units, each unit
//	           replayed with its T spans lasting (1 - r) times as long (ties
//	           between siblings ending together broken as the walk does: the
//	           later start) and
//	           everything causally after them moved: a child waits for
//	           every sibling that ended before it started (a join), starting
//	           when the last of them ends in the replay plus the gap it left
//	           after the last as recorded, or the same gap after its
//	           parent's start; a parent ends the same gap after its last
//	           child. It sees overlap, joins and a shift of the critical
//	           path that Σ q·r cannot. Timestamps cannot tell a dependency
//	           from a coincidence, so the join is the conservative reading:
//	           a sibling that merely happened to end earlier is waited for
//	           too, which can only under-predict a gain. The alternative,
//	           waiting only for the sibling that ended last, over-predicts
//	           a fork-join (X ∥ Y, then Z: X twice as fast gives 41.7 %
//	           where Y's end makes it 33.3 %, TestReplayHonoursJoins).
//	measured = 1 - mean e2e(C) / mean e2e(B); of paired runs, 1 - the
//	           geometric mean over pairs i of mean e2e(C_i) / mean e2e(B_i)
//
// Neither prediction uses C's critical path or e2e: only B's tree and the
// own work of T's rows. Failed and cancelled units count like the others
// (their e2e is time the run spent); a report shows how many failed. (Computing r from critical time would
// make Σ q·r equal the measured gain by algebra.) Every figure has a 95 %
// interval over the experiment's independent draws. Of paired runs
// (CompareOptions.Paired, as amdahl ab makes them: run i of each side side
// by side, on the same items, so that a drift of the machine's speed
// cancels out), the draws are the pairs: every figure is computed per
// pair, and its interval is Student's t over the pairs around their mean —
// the measured gain and r over the pairs' log ratios, each pair counted
// once. (Over 10 simulated pairs, TestPairedBootstrapCoverage: the t
// interval held 0 in 77 of 80 A/A experiments; a bootstrap of the pooled
// ratio over whole pairs in 65, too narrow; one that also drew each run's
// units again in 80 of 80, three times too wide.) Otherwise a percentile
// bootstrap (400 resamples), expanded for few clusters as Hesterberg
// proposes (over 6 simulated pairs of runs a plain percentile interval
// held 0 in 170 of 200 A/A experiments, the expanded one in 190, the t
// interval in 193: TestFewPairsCoverage): over
// runs, then units within each drawn run, when both sides hold two runs or
// more — units of one run share its conditions (machine load, cache, the
// other units in flight) and are not independent; over units otherwise,
// and the verdict then says that the intervals leave out run-to-run
// variation.
// The verdict says whether the measured interval holds the replay's
// prediction; if not, which rows outside the target moved their critical
// time significantly (each row's shift: its critical time per unit B − C
// over B's mean e2e; the shifts of all rows add up to the measured gain).
package attribution
