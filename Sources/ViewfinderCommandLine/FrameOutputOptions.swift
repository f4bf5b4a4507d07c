import ArgumentParser
import Dispatch
import Foundation
import ViewfinderKit

/// `run`'s frame outputs for other programs: a y4m/raw stream to a file or pipe, and a
/// shared-memory ring.
struct FrameOutputOptions: ParsableArguments {
    @Option(help: "Write the frames that leave the stages to this file, or '-' for stdout (a pipe), as y4m (or --output-format raw).")
    var output: String?
    @Option(name: .customLong("output-format"), help: "Format of --output: y4m (default) or raw (bare planes; the layout is printed to stderr).")
    var outputFormat: String = "y4m"
    @Option(help: "Publish the frames into the POSIX shared-memory ring /dev/shm/NAME (for python/ FrameReader and other local readers).")
    var shm: String?
    @Option(name: .customLong("shm-slots"), parsing: .unconditional, help: "Frames the shared-memory ring holds (2…1024).")
    var shmSlots: Int?

    func validate() throws {
        guard FramePipeOutput.Format(rawValue: outputFormat) != nil else {
            throw ValidationError("unknown --output-format '\(outputFormat)' (known: \(FramePipeOutput.Format.allCases.map(\.rawValue).joined(separator: ", ")))")
        }
        if output == nil && outputFormat != "y4m" { throw ValidationError("--output-format needs --output") }
        if output == "-" && isatty(STDOUT_FILENO) != 0 { throw ValidationError("refusing to write frames to a terminal: pipe --output - into a program, or give a file") }
        if let n = shmSlots, !(2...1024).contains(n) { throw ValidationError("--shm-slots must be within 2…1024") }
        if shm == nil && shmSlots != nil { throw ValidationError("--shm-slots needs --shm") }
        if let s = shm, s.isEmpty || s.contains("/") || s == "." || s == ".." || s.utf8.count > 200 {
            throw ValidationError("--shm takes a bare name (no '/', not '.' or '..', at most 200 bytes); the ring is /dev/shm/NAME")
        }
    }

    /// Whether the frames go to stdout (then the summary goes to stderr).
    var usesStdout: Bool { output == "-" }

    /// Adds the requested outputs to a session being configured. A reader closing the pipe (or a
    /// failed write) stops the run.
    func addOutputs(to session: CaptureSession) throws -> FrameOutputs {
        var outs = FrameOutputs()
        if let output {
            let pipe = FramePipeOutput(path: output, format: FramePipeOutput.Format(rawValue: outputFormat) ?? .y4m)
            pipe.onClosed = { [weak session] in session?.requestStop() }
            // Stdout carries the frames: a raw stream's layout goes to stderr.
            pipe.onRawLayout = { StandardStreams.error("viewfinder: \($0)\n") }
            try session.addOutput(pipe)
            outs.pipe = pipe
        }
        if let shm {
            // A ring another running writer holds is refused now, before anything is captured
            // (the output itself would find out at the stream's start and publish nothing).
            try ShmRingWriter.checkAvailable(name: shm)
            let ring = SharedMemoryOutput(name: shm, slots: shmSlots ?? 8)
            try session.addOutput(ring)
            outs.shm = ring
        }
        return outs
    }
}

/// The frame outputs of one run, and their part of the summary.
struct FrameOutputs {
    var pipe: FramePipeOutput?
    var shm: SharedMemoryOutput?

    /// Summary entries: per output, frames written and the books (`delivered` = written +
    /// `consumer_late` + `after_close` for the pipe; = published + `consumer_late` + `mismatched`).
    func summary(_ stats: EngineStatistics) -> [String: Any] {
        var d: [String: Any] = [:]
        func late(_ name: String) -> UInt64 { stats.consumers.first { $0.name == name }?.drops.total ?? 0 }
        if let p = pipe {
            // The key is "pipe" for every --output (kept for readers of the JSON); `kind` says what
            // the path is: a regular file, a fifo, a device, or standard output.
            var e: [String: Any] = ["path": p.path, "kind": Self.kind(of: p.path), "format": p.format.rawValue, "frames": p.framesWritten,
                                    "consumer_late": late(p.consumerName), "after_close": p.framesAfterClose, "reader_closed": p.readerClosed]
            // A reader that held the pipe open without reading when Ctrl-C or SIGTERM came.
            if p.readerStalled { e["reader_stalled"] = true }
            if let err = p.error { e["error"] = "\(err)" }
            d["pipe"] = e
        }
        if let s = shm {
            var e: [String: Any] = ["name": s.ringName, "slots": s.slotCount, "frames": s.framesPublished,
                                    "consumer_late": late(s.consumerName), "mismatched": s.framesMismatched]
            if let pid = s.replacedStaleWriter { e["replaced_stale_ring_of_pid"] = pid }
            if let err = s.error { e["error"] = "\(err)" }
            d["shm"] = e
        }
        return d
    }

    /// What an output path is: `stdout`, `file`, `fifo`, `device`, or `other`.
    static func kind(of path: String) -> String {
        if path == "-" { return "stdout" }
        var st = stat()
        guard stat(path, &st) == 0 else { return "other" }
        switch st.st_mode & S_IFMT {
        case S_IFREG: return "file"
        case S_IFIFO: return "fifo"
        case S_IFCHR, S_IFBLK: return "device"
        default: return "other"
        }
    }

    func text(_ stats: EngineStatistics) -> String {
        var s = ""
        for (key, value) in summary(stats).sorted(by: { $0.key < $1.key }) {
            guard let e = value as? [String: Any] else { continue }
            s += "\n  \(key): " + e.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
        }
        return s
    }

    /// Throws the failure of an output that could not go on (a full disk under `--output`, a
    /// ring that could not be created): it fails the run, as `dump`'s and `record`'s outputs do.
    /// A reader that closed the pipe is no failure (the run ends, as it asked).
    func checkFailures() throws {
        if let p = pipe, let e = p.error { throw RuntimeFailure(message: FramePipeOutput.failureText(path: p.path, error: e)) }
        if let r = shm, let e = r.error { throw RuntimeFailure(message: "shared-memory ring '\(r.ringName)': \(e)") }
    }

    /// Where the summary goes: stderr when stdout carries the frames.
    static func printSummary(_ text: String, toStderr: Bool) {
        if toStderr { StandardStreams.error(text + "\n") } else { print(text) }
    }
}
