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
    @Flag(help: "Overwrite existing output and metadata files (a fifo or a device is written into either way).") var force = false

    func run() throws {
        let registry = ViewfinderCommandLine.stages
        try refuseOverwritingInput(output, inputs: [input])
        try refuseOverwritingInput(metadata, inputs: [input], what: "metadata file")
        try refuseOneFileForTwoOutputs(("--output", output), ("--metadata", metadata))
        try refuseExistingRegularFile(output, force: force)
        try refuseExistingRegularFile(metadata, force: force)
        let specs = stages.isEmpty ? [] : try StageSpec.parseList(stages).filter(\.enabled)
        let built = try specs.map { try registry.makeStage($0) }
        try registry.checkRepeats(specs)
        let reader = try Y4MReader(path: input)
        let format = reader.format
        let drops = DropCounters()
        let chain = StageChain(stages: built, drops: drops)
        // Both files are checked before either is opened (opening truncates): a bad one leaves
        // the other as it was.
        if output != "-" {
            do { try StreamFile.checkWritable(output) } catch { throw RuntimeFailure.cannotCreate("output", output, error) }
        }
        var meta: WholeLineFile?
        if let path = metadata {
            // Opened in place, as `run --metadata` opens it (`StreamFile`): a fifo or a device
            // there is written into, not replaced.
            do { meta = WholeLineFile(path: path, fd: try StreamFile.openForWriting(path), flushBytes: 0) } catch {
                throw RuntimeFailure.cannotCreate("metadata file", path, error)
            }
        }
        defer { meta?.close() }
        // The input's range and pixel aspect go through as they were said (or not said): the
        // stages change neither (the aspect was written 1:1 whatever the input's).
        let writer = try Y4MWriter(path: output, format: format, interval: reader.header.interval, colorRange: reader.header.colorRange,
                                   pixelAspect: reader.header.aspect)

        var written = 0
        var writeError: (any Error)?
        let context = StageContext(format: format, frameIntervalNanoseconds: reader.header.interval?.nanoseconds ?? 0, controls: nil, isLive: false)
        // The chain lends each frame for the call and releases it afterwards itself.
        try chain.prepare(format: format, context: context) { frame in
            guard writeError == nil else { return }
            do {
                try writer.write(frame)
                written += 1
                // Each line as it comes (a reader on a fifo sees it at once); a failed write
                // leaves the file's whole lines and stops the run with which file and after how many.
                if let meta, !meta.append(frame.metadataJSON()) {
                    throw RuntimeFailure(message: meta.failureMessage ?? "writing the metadata file '\(meta.path)' failed")
                }
            } catch { writeError = error }
        }
        // Enough frames for every stage's look-ahead plus the one being read.
        let pool = FramePool(format: format, count: chain.delayFrames + 4)
        var inputError: (any Error)?
        // Ctrl-C (or SIGTERM) ends the run at the next frame as `run` ends: the frames the stages
        // hold come out, the file is whole, the summary says how far it got (it died by the
        // signal, without a summary).
        let sig = onInterrupt {}
        defer { sig.cancel() }
        let start = monotonicNanoseconds()
        while writeError == nil && !sig.requested {
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
            var line = "process: \(reader.framesRead) frames read, \(written) written" + (sig.requested ? " (interrupted)" : "")
            let d = drops.byName
            if !d.isEmpty { line += ", dropped " + d.sorted(by: { $0.key < $1.key }).map { "\($0.key)=\($0.value)" }.joined(separator: " ") }
            line += String(format: ", %.2f s (%.1f fps)", secs, Double(reader.framesRead) / max(secs, 1e-9))
            for (n, us) in zip(chain.names, chain.meanMicroseconds) { line += String(format: "; %@ %.0f µs/frame", n, us) }
            StandardStreams.error(line + "\n")
        }
        if let inputError { throw inputError }
    }
}
