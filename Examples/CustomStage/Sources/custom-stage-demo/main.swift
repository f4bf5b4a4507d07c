// Runs the user's `negative` stage by name, next to the built-in ones, and checks what it did.
import Foundation
import MyStages
import ViewfinderKit

final class Check: FrameConsumer, @unchecked Sendable {
    // @unchecked Sendable: the counters are only touched on the consumer thread, read after join.
    let consumerName = "check"
    var frames = 0
    var sawMetadata = 0
    let key = MetadataKey("negative.mean_luma")
    func consume(_ frame: Frame) {
        frames += 1
        if frame.metadata.custom.value(key) != nil && frame.pixelsModified { sawMetadata += 1 }
    }
}

do {
    let registry = try StageRegistry.builtIn.merging(.myStages)
    precondition(registry.names.contains("negative"), "the plugin did not register the user's stage")
    let specs = try StageSpec.parseList(CommandLine.arguments.dropFirst().first ?? "negative:strength=1,null")
    let stages = try specs.map { try registry.makeStage($0) }
    // The same stage on a YUYV, an NV12 and an MJPEG camera (MJPEG: through the decoded view).
    for format in [PixelFormat.yuyv, .nv12, .mjpeg] {
        let directory = DeviceDirectory.standard
        let source = try directory.open("sim:width=320,height=240,paced=false,frames=30,format=\(format.rawValue)")
        let config = try source.configure(StreamRequest(pixelFormat: format, width: 320, height: 240, fps: 30))
        let check = Check()
        let engine = CaptureEngine(source: source, configuration: config, stages: stages, consumers: [check], pixelDecoders: directory.pixelDecoders)
        try engine.start()
        engine.waitUntilFinished()
        print("\(format): ran \(specs.map(\.name).joined(separator: ",")) on \(check.frames) frames; \(check.sawMetadata) carried the negative stage's metadata")
        guard check.frames == 30, check.sawMetadata == 30 else { exit(1) }
    }
} catch {
    FileHandle.standardError.write(Data("custom-stage-demo: error: \(error)\n".utf8))
    exit(1)
}
