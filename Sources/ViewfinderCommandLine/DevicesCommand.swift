import ArgumentParser
import Foundation
import ViewfinderKit

struct DevicesCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "devices",
        abstract: "List cameras with their formats, sizes, rates and controls, sound capture devices with their formats, rates and channels, and every device string's options.")

    @Flag(help: "Print JSON for scripts: {\"devices\": [...], \"device_strings\": [...]}; sound devices have \"media_type\": \"audio\".") var json = false

    /// What `--json` prints.
    struct Listing: Encodable {
        let devices: [ListedDevice]
        let deviceStrings: [DeviceKindDocumentation]
        enum CodingKeys: String, CodingKey { case devices, deviceStrings = "device_strings" }
    }

    func run() throws {
        let directory = DeviceDirectory.standard
        let devices = directory.discover()
        let sound = ALSA.discover()
        if json {
            let enc = JSONEncoder()
            enc.outputFormatting = [.prettyPrinted, .sortedKeys]
            let all = devices.map { ListedDevice.video($0) } + sound.map { ListedDevice.audio($0) }
            print(String(decoding: try enc.encode(Listing(devices: all, deviceStrings: directory.kinds)), as: UTF8.self))
            return
        }
        for d in devices { print(DevicesCommand.render(d)) }
        for a in sound { print(ListedDevice.render(a)) }
        print("Device strings (/dev/videoN opens a V4L2 capture node; it takes no options):")
        for k in directory.kinds {
            print("\(k.syntax) — \(k.summary)")
            for line in renderOptions(k.options) { print(line) }
        }
    }

    /// Like `v4l2-ctl --list-formats-ext`, then the controls.
    static func render(_ d: DeviceInfo) -> String {
        var s = "\(d.id): \(d.name) (driver \(d.driver), bus \(d.bus))\(d.isLive ? "" : " [not live]")\n"
        for id in d.stableIDs { s += "    also \(id)\n" }
        s += "  Formats:\n"
        for (i, f) in d.formats.enumerated() {
            s += "    [\(i)]: '\(fourCCString(f.fourcc))' (\(f.description)\(f.compressed ? ", compressed" : ""))\(f.pixelFormat == nil ? " [via libv4lconvert]" : "")\n"
            for size in f.sizes {
                switch size {
                case .discrete(let w, let h, let iv):
                    s += "        Size: Discrete \(w)x\(h)\n"
                    for x in iv { s += "            Interval: Discrete \(Double(x.numerator) / Double(x.denominator))s (\(x))\n" }
                case .stepwise(let a, let b, let st, let c, let e, let t, let iv):
                    s += "        Size: Stepwise \(a)x\(c) - \(b)x\(e) with step \(st)/\(t)\n"
                    if !iv.isEmpty { s += "            Intervals: \(iv.map(\.description).joined(separator: ", "))\n" }
                }
            }
        }
        if !d.controls.isEmpty {
            s += "  Controls:\n"
            for c in d.controls {
                s += "    \(c.name) (\(c.kind.rawValue)): min=\(c.minimum) max=\(c.maximum) step=\(c.step) default=\(c.defaultValue)"
                if !c.flags.isEmpty { s += " flags=\(c.flags.sorted().joined(separator: ","))" }
                s += "\n"
                for (v, n) in c.menu.sorted(by: { $0.key < $1.key }) { s += "        \(v): \(n)\n" }
            }
        }
        return s
    }
}

struct StagesCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "stages", abstract: "List every registered stage with its options (units, defaults, ranges).")

    @Flag(help: "Print JSON for scripts.") var json = false

    func run() throws {
        let reg = ViewfinderCommandLine.stages
        if json {
            struct Entry: Encodable { let name: String; let summary: String; let options: [OptionDocumentation] }
            let out = try reg.names.map { n in let t = try reg.type(named: n); return Entry(name: n, summary: t.summary, options: t.optionDocumentation) }
            let enc = JSONEncoder()
            enc.outputFormatting = [.prettyPrinted, .sortedKeys]
            print(String(decoding: try enc.encode(out), as: UTF8.self))
            return
        }
        for n in reg.names {
            let t = try reg.type(named: n)
            print("\(n) — \(t.summary)")
            for line in renderOptions(t.optionDocumentation) { print(line) }
        }
    }
}

/// The lines that document options (stages' and devices' alike): name, type, unit, default,
/// range, then the summary.
func renderOptions(_ options: [OptionDocumentation]) -> [String] {
    options.flatMap { o -> [String] in
        var line = "    \(o.name) (\(o.type)"
        if let u = o.unit { line += ", \(u)" }
        line += ") default \(o.defaultValue)"
        if let r = o.range { line += ", range \(r)" }
        return [line, "        \(o.summary)"]
    }
}
