import ArgumentParser
import Foundation
import ViewfinderKit

/// `viewfinder controls --device DEV [--set name=value]...`: lists a device's controls with their
/// current values, or sets some (then lists them). Unknown names and out-of-range values fail with
/// the device's own list or range.
struct ControlsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "controls",
        abstract: "List a device's controls (exposure, gain, focus, white balance, …) or set them.")

    @Option(name: .shortAndLong, help: "The device (/dev/video0, v4l2:/dev/video0, sim, …).") var device: String = "/dev/video0"
    @Option(name: .customLong("set"), help: "Set a control: name=value (repeatable). Standard names such as gain or auto_exposure work on every device.")
    var assignments: [String] = []

    func run() throws {
        let source = try DeviceDirectory.standard.open(device)
        defer { source.stop() }
        guard let controls = source.controls else {
            // Asked to set something on a device that has nothing to set: not a silent success.
            if !assignments.isEmpty { throw ValidationError("'\(device)' has no controls to set (--set \(assignments.joined(separator: " --set ")))") }
            print("\(device): no controls")
            return
        }
        for a in assignments {
            let parts = a.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 2, !parts[0].isEmpty, let value = Int64(parts[1]) else {
                throw ValidationError("--set wants name=integer, got '\(a)'")
            }
            try controls.set(parts[0], to: value)
        }
        print(ControlsCommand.render(controls))
    }

    /// One line per control (`v4l2-ctl --list-ctrls-menus` style), menus indented below.
    static func render(_ controls: any DeviceControlling) -> String {
        var s = ""
        for c in controls.descriptors {
            var line = "\(c.name) 0x\(String(c.id, radix: 16)) (\(c.kind.rawValue))"
            switch c.kind {
            case .integer, .integer64, .menu, .integerMenu:
                line += ": min=\(c.minimum) max=\(c.maximum)" + (c.kind == .integer || c.kind == .integer64 ? " step=\(c.step)" : "") + " default=\(c.defaultValue)"
            case .boolean:
                line += ": default=\(c.defaultValue)"
            default: break
            }
            if c.kind != .button, !c.flags.contains("write-only"), let v = try? controls.value(of: c.name) { line += " value=\(v)" }
            if !c.flags.isEmpty { line += " flags=\(c.flags.sorted().joined(separator: ","))" }
            if let st = c.standard, st.rawValue != c.name { line += " [\(st.rawValue)]" }
            s += line + "\n"
            for (v, n) in c.menu.sorted(by: { $0.key < $1.key }) { s += "    \(v): \(n)\n" }
        }
        return s
    }
}
