// What a user types or writes: pipeline JSON files (`--pipeline FILE`), stage lists with options
// (`--stages exposure:mode=auto,focus`), and device strings (`sim:…`, `pattern:…`, `dump:FILE,…`),
// through to building the stages from the registry.
//
// Input: one mode byte (0: pipeline JSON, 1: stage list, 2: device string), then the text.
import FuzzSupport
import Glibc
import ViewfinderKit

@main enum FuzzPipeline {
    static func main() {
        FuzzSeeds.handle(makeSeeds)
        let registry = StageRegistry.builtIn
        let file = MemoryFile(name: "pipeline")
        FuzzDriver.run { data in
            var input = FuzzInput(data)
            let mode = input.byte() % 3
            let text = String(decoding: input.remaining, as: UTF8.self)
            var specs: [StageSpec] = []
            switch mode {
            case 0:
                file.set(input.remaining)
                guard let config = try? PipelineConfiguration.load(path: file.path) else { return }
                specs = config.stages
                if let device = config.device { parseDevice(device) }
            case 1:
                guard let list = try? StageSpec.parseList(text) else { return }
                specs = list
            default:
                parseDevice(text)
            }
            for spec in specs.prefix(16) { _ = try? registry.makeStage(spec) }
        }
    }

    static func parseDevice(_ text: String) {
        _ = try? SimOptions(deviceString: text)
        _ = try? DumpSource.parse(device: text)
        let body: Substring = text.hasPrefix("pattern:") ? text.dropFirst(8) : Substring(text)
        _ = try? PatternSource.Options.decode(keyValues: body, device: text)
        _ = try? AudioStreamRequest(options: text)
    }

    static func makeSeeds(_ dir: String) throws {
        let pipelines = [
            #"{"device": "sim:width=1280,height=720,fps=30", "stages": [{"name": "exposure", "options": {"mode": "continuous"}}, {"name": "focus", "enabled": false}]}"#,
            #"{"stages": [{"name": "deadline", "options": {"max_age_ms": 50, "policy": "drop"}}, {"name": "null"}]}"#,
            #"{"device": "dump:/tmp/x.vfdump,paced=false", "stages": [{"name": "stabilise"}]}"#,
        ]
        let lists = ["exposure:mode=auto:bias=0.3,focus,deadline:max_age_ms=50", "null,stabilise", "exposure:mode=continuous"]
        let devices = ["sim:width=640,height=480,fps=60,format=mjpeg,shake=2,paced=false", "pattern:width=64,height=48",
                       "dump:/tmp/a.vfdump,paced=false,loop=true", "sim:scene=chart,noise=0.5,frames=10"]
        for (i, s) in pipelines.enumerated() { try FuzzSeeds.write([0] + Array(s.utf8), to: dir, name: "pipeline\(i).seed") }
        for (i, s) in lists.enumerated() { try FuzzSeeds.write([1] + Array(s.utf8), to: dir, name: "stages\(i).seed") }
        for (i, s) in devices.enumerated() { try FuzzSeeds.write([2] + Array(s.utf8), to: dir, name: "device\(i).seed") }
    }
}
