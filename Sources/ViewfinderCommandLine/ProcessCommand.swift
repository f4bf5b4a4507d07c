import ArgumentParser
import Foundation
import ViewfinderKit

/// `viewfinder process --input IN --stages a,b --output OUT [--metadata frames.jsonl]`: runs stages
/// over a YUV4MPEG2 file (or stdin) on this thread and writes the result as YUV4MPEG2 (or stdout),
/// so `ffmpeg … -f yuv4mpegpipe - | viewfinder process --input - --output - … | ffmpeg …` works.
///
/// A malformed or truncated input ends the run with an error naming the byte offset; every frame
/// before it has been processed and written (held look-ahead frames included).
struct ProcessCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "process",
        abstract: "Run stages over a YUV4MPEG2 file (4:2:0, 4:2:2, mono) and write YUV4MPEG2.",
        discussion: "Use - for stdin/stdout. Example: viewfinder process --input in.y4m --stages stabilise:lookahead=15,focus --output out.y4m --metadata frames.jsonl")

    @Option(help: "Input .y4m file, or - for stdin.") var input: String
    @Option(help: "Stages, e.g. stabilise:lookahead=15,focus:mode=locked (see `viewfinder stages`).") var stages: String = ""
    @Option(help: "Output .y4m file, or - for stdout.") var output: String
    @Option(help: "Write one JSON line of metadata per output frame to this file.") var metadata: String?
    @Flag(help: "Print no summary on stderr.") var quiet = false

    func run() throws {
        let registry = ViewfinderCommandLine.stages
        try refuseOverwritingInput(output, inputs: [input])
        try refuseOverwritingInput(metadata, inputs: [input], what: "metadata file")
        try refuseOneFileForTwoOutputs(("--output", output), ("--metadata", metadata))
        let specs = try StageSpec.parseList(stages).filter(\.enabled)
        let built = try specs.map { try registry.makeStage($0) }
        let reader = try Y4MReader(path: input)
        let format = reader.format
        let drops = DropCounters()
        let chain = StageChain(stages: built, drops: drops)
        // Both files are checked before either is opened (opening truncates): a bad one leaves
        // the other as it was.
        if output != "-" {
            do { try StreamFile.checkWritable(output) } catch { throw RuntimeFailure.cannotCreate("output", output, error) }
        }
        var meta: MetadataLines?
        if let path = metadata {
            // Opened in place, as `run --metadata` opens it (`StreamFile`): a fifo or a device
            // there is written into, not replaced.
            do { meta = MetadataLines(path: path, fd: try StreamFile.openForWriting(path)) } catch {
                throw RuntimeFailure.cannotCreate("metadata file", path, error)
            }
        }
        defer { meta?.close() }
        // The input's range goes through as it was said (or not said): the stages do not change it.
        let writer = try Y4MWriter(path: output, format: format, interval: reader.header.interval, colorRange: reader.header.colorRange)

        var written = 0
        var writeError: (any Error)?
        let context = StageContext(format: format, frameIntervalNanoseconds: reader.header.interval?.nanoseconds ?? 0, controls: nil, isLive: false)
        // The chain lends each frame for the call and releases it afterwards itself.
        try chain.prepare(format: format, context: context) { frame in
            guard writeError == nil else { return }
            do {
                try writer.write(frame)
                written += 1
                try meta?.write(frame.metadataJSON() + "\n")
            } catch { writeError = error }
        }
        // Enough frames for every stage's look-ahead plus the one being read.
        let pool = FramePool(format: format, count: chain.delayFrames + 4)
        var inputError: (any Error)?
        let start = monotonicNanoseconds()
        while writeError == nil {
            guard let frame = pool.acquire() else {
                throw RuntimeFailure(message: "the stages hold more frames than they declare (\(chain.delayFrames)); cannot continue")
            }
            do {
                guard try reader.read(into: frame) else { frame.release(); break }
            } catch {
                frame.release()
                inputError = error
                break
            }
            frame.receiveTime = monotonicNanoseconds()
            chain.run(frame)
        }
        chain.finish()
        try writer.flush()
        writer.close()
        if let writeError { throw writeError }
        if !quiet {
            let secs = Double(monotonicNanoseconds() - start) / 1e9
            var line = "process: \(reader.framesRead) frames read, \(written) written"
            let d = drops.byName
            if !d.isEmpty { line += ", dropped " + d.sorted(by: { $0.key < $1.key }).map { "\($0.key)=\($0.value)" }.joined(separator: " ") }
            line += String(format: ", %.2f s (%.1f fps)", secs, Double(reader.framesRead) / max(secs, 1e-9))
            for (n, us) in zip(chain.names, chain.meanMicroseconds) { line += String(format: "; %@ %.0f µs/frame", n, us) }
            StandardStreams.error(line + "\n")
        }
        if let inputError { throw inputError }
    }
}

/// `process --metadata`: one line per frame, written as it comes; a failed write (a full disk)
/// cuts a regular file back to its last whole line and says which file and after how many lines.
final class MetadataLines {
    let path: String
    private var fd: Int32
    private var bytes = 0
    private var lines = 0
    init(path: String, fd: Int32) { self.path = path; self.fd = fd }

    func write(_ line: String) throws {
        var done = 0
        let failed: Int32? = Array(line.utf8).withUnsafeBytes { b -> Int32? in
            while done < b.count {
                let n = Glibc.write(fd, b.baseAddress! + done, b.count - done)
                if n > 0 { done += n; continue }
                if n < 0 && errno == EINTR { continue }
                return n < 0 ? errno : ENOSPC
            }
            return nil
        }
        if let e = failed {
            var st = stat()
            if done > 0, fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG { _ = ftruncate(fd, off_t(bytes)) }
            throw RuntimeFailure(message: "writing the metadata file '\(path)' failed after \(lines) lines: \(String(cString: strerror(e)))")
        }
        bytes += done
        lines += 1
    }

    func close() {
        if fd >= 0 { Glibc.close(fd); fd = -1 }
    }
}
