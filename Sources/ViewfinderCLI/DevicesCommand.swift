import ArgumentParser
import Foundation
import ViewfinderKit

struct DevicesCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "devices", abstract: "List cameras with their formats, sizes, rates and controls.")

    @Flag(help: "Print JSON for scripts.") var json = false

    func run() throws {
        let devices = DeviceDirectory.standard.discover()
        if json {
            let enc = JSONEncoder()
            enc.outputFormatting = [.prettyPrinted, .sortedKeys]
            print(String(decoding: try enc.encode(devices), as: UTF8.self))
            return
        }
        for d in devices { print(DevicesCommand.render(d)) }
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
        let reg = StageRegistry.builtIn
        if json {
            var out: [[String: Any]] = []
            for n in reg.names {
                let t = try reg.type(named: n)
                out.append(["name": n, "summary": t.summary, "options": t.optionDocumentation.map { o -> [String: Any] in
                    var d: [String: Any] = ["name": o.name, "type": o.type, "default": o.defaultValue, "summary": o.summary]
                    if let r = o.range { d["range"] = r }
                    if let u = o.unit { d["unit"] = u }
                    return d
                }])
            }
            print(jsonString(out))
            return
        }
        for n in reg.names {
            let t = try reg.type(named: n)
            print("\(n) — \(t.summary)")
            for o in t.optionDocumentation {
                var line = "    \(o.name) (\(o.type)"
                if let u = o.unit { line += ", \(u)" }
                line += ") default \(o.defaultValue)"
                if let r = o.range { line += ", range \(r)" }
                print(line)
                print("        \(o.summary)")
            }
        }
    }
}
