import Foundation
import ViewfinderKit

/// CPU time of this process's threads, read from `/proc/self/task/*/stat`.
public enum ThreadCPU {
    /// One thread's cumulative CPU time.
    public struct Sample: Sendable, Equatable {
        public var tid: Int
        public var name: String
        /// User plus system time, seconds.
        public var seconds: Double
    }

    /// Every thread of the process now (empty where `/proc` cannot be read).
    public static func sample() -> [Sample] {
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        guard ticks > 0, let tids = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task") else { return [] }
        var out: [Sample] = []
        for t in tids {
            guard let tid = Int(t), let stat = try? String(contentsOfFile: "/proc/self/task/\(t)/stat", encoding: .utf8),
                  let parsed = parse(stat: stat) else { continue }
            out.append(Sample(tid: tid, name: parsed.name, seconds: Double(parsed.utime + parsed.stime) / ticks))
        }
        return out
    }

    /// The name, user and system ticks of a `stat` line (`pid (comm) state … utime stime …`); the
    /// name may hold spaces and parentheses, so the fields are counted from the last `)`.
    public static func parse(stat: String) -> (name: String, utime: UInt64, stime: UInt64)? {
        guard let open = stat.firstIndex(of: "("), let close = stat.lastIndex(of: ")"), open < close else { return nil }
        let name = String(stat[stat.index(after: open)..<close])
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // fields[0] is the state (field 3); utime and stime are fields 14 and 15.
        guard fields.count > 12, let u = UInt64(fields[11]), let s = UInt64(fields[12]) else { return nil }
        return (name, u, s)
    }
}

/// Samples a running session every `interval`: counts for the timeline and the threads' CPU.
final class RunSampler: @unchecked Sendable {
    // @unchecked Sendable: `points` and `cpu` are written by the sampler thread only until `stop()`
    // joins it; they are read after that.
    private let stopFlag = LockedBox(false)
    private var thread: EngineThread?
    private(set) var points: [TimelinePoint] = []
    private(set) var ringCapacities: [String: Int] = [:]
    /// The first and last CPU time seen of each thread (by tid), and its name.
    private(set) var cpu: [Int: (name: String, first: Double, last: Double)] = [:]
    private let start: UInt64

    init(session: CaptureSession, start: UInt64, before: [ThreadCPU.Sample], intervalSeconds: Double = 0.1) {
        self.start = start
        for s in before { cpu[s.tid] = (s.name, s.seconds, s.seconds) }
        let stopFlag = self.stopFlag
        thread = EngineThread(name: "vf-bench-sample") { [unowned self] in
            while true {
                let stopping = stopFlag.withLock { $0 }
                self.take(session)
                if stopping { break }
                sleepUntil(monotonicNanoseconds: monotonicNanoseconds() + UInt64(intervalSeconds * 1e9))
            }
        }
    }

    private func take(_ session: CaptureSession) {
        for s in ThreadCPU.sample() {
            if let c = cpu[s.tid] { cpu[s.tid] = (s.name, c.first, s.seconds) }
            // A thread born since the first sample started at zero CPU time.
            else { cpu[s.tid] = (s.name, 0, s.seconds) }
        }
        guard let st = session.statistics else { return }
        var drops: [String: UInt64] = st.drops.byName
        for c in st.consumers { for (k, v) in c.drops.byName { drops["\(c.name).\(k)", default: 0] += v } }
        var rings: [String: Int] = [:]
        for r in session.ringOccupancy {
            rings[r.name] = r.count
            ringCapacities[r.name] = r.capacity
        }
        points.append(TimelinePoint(seconds: Double(monotonicNanoseconds() - start) / 1e9, captured: st.captured, delivered: st.delivered, drops: drops, rings: rings))
    }

    func stop() {
        stopFlag.withLock { $0 = true }
        thread?.join()
        thread = nil
    }
}
