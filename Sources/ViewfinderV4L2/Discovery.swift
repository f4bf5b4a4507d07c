import CV4L2
import Viewfinder
import Logging

/// A control as the kernel describes it, with what the backend needs to get and set it.
struct KernelControl: Sendable, Equatable {
    var descriptor: ControlDescriptor
    var type: UInt32
    var rawFlags: UInt32
}

/// What `VIDIOC_QUERYCAP` says about a node.
public struct V4L2Capability: Sendable, Equatable, Codable {
    public var driver: String
    public var card: String
    public var bus: String
    public var version: UInt32
    public var capabilities: UInt32
    public var deviceCaps: UInt32

    init(_ c: v4l2_capability) {
        driver = cString(c.driver)
        card = cString(c.card)
        bus = cString(c.bus_info)
        version = c.version
        capabilities = c.capabilities
        deviceCaps = (c.capabilities & V4L2.capDeviceCaps) != 0 ? c.device_caps : c.capabilities
    }

    /// A single-planar video capture node with streaming I/O: what the backend drives.
    public var isVideoCapture: Bool { deviceCaps & V4L2.capVideoCapture != 0 }
}

/// Enumeration of a device's format tree and controls (internal layer over ``V4L2Handle``).
enum V4L2Enumerator {
    static func formats(_ h: V4L2Handle) -> [FormatDescription] {
        var out: [FormatDescription] = []
        var i: UInt32 = 0
        while case .success(let d) = h.enumFormat(index: i), i < 256 {
            let fourcc = d.pixelformat
            out.append(FormatDescription(
                pixelFormat: PixelFormat(fourcc: fourcc), fourcc: fourcc, description: cString(d.description),
                compressed: d.flags & V4L2.fmtFlagCompressed != 0, sizes: sizes(h, fourcc: fourcc)))
            i += 1
        }
        return out
    }

    static func sizes(_ h: V4L2Handle, fourcc: UInt32) -> [FrameSizeRange] {
        var out: [FrameSizeRange] = []
        var i: UInt32 = 0
        while case .success(let s) = h.enumFrameSize(fourcc: fourcc, index: i), i < 1024 {
            if s.type == V4L2.frmsizeDiscrete {
                let w = Int(s.discrete.width), hh = Int(s.discrete.height)
                out.append(.discrete(width: w, height: hh, intervals: intervals(h, fourcc: fourcc, width: w, height: hh)))
            } else {
                let sw = s.stepwise
                let continuous = s.type == V4L2.frmsizeContinuous
                out.append(.stepwise(minWidth: Int(sw.min_width), maxWidth: Int(sw.max_width), stepWidth: continuous ? 1 : Int(max(sw.step_width, 1)),
                                     minHeight: Int(sw.min_height), maxHeight: Int(sw.max_height), stepHeight: continuous ? 1 : Int(max(sw.step_height, 1)),
                                     intervals: intervals(h, fourcc: fourcc, width: Int(sw.max_width), height: Int(sw.max_height))))
                break // stepwise/continuous has exactly one entry
            }
            i += 1
        }
        return out
    }

    static func intervals(_ h: V4L2Handle, fourcc: UInt32, width: Int, height: Int) -> [FrameInterval] {
        var out: [FrameInterval] = []
        var i: UInt32 = 0
        while case .success(let e) = h.enumFrameInterval(fourcc: fourcc, width: width, height: height, index: i), i < 256 {
            if e.type == V4L2.frmivalDiscrete {
                out.append(FrameInterval(numerator: e.discrete.numerator, denominator: e.discrete.denominator))
            } else {
                // Stepwise/continuous: report the fastest and slowest.
                out.append(FrameInterval(numerator: e.stepwise.min.numerator, denominator: e.stepwise.min.denominator))
                out.append(FrameInterval(numerator: e.stepwise.max.numerator, denominator: e.stepwise.max.denominator))
                break
            }
            i += 1
        }
        return out
    }

    /// Every control, walking `VIDIOC_QUERY_EXT_CTRL` with `NEXT_CTRL | NEXT_COMPOUND`.
    static func controls(_ h: V4L2Handle) -> [KernelControl] {
        var out: [KernelControl] = []
        var q = v4l2_query_ext_ctrl()
        q.id = V4L2.ctrlFlagNextCtrl | V4L2.ctrlFlagNextCompound
        var guardCount = 0
        while case .success = h.ioctl(VF_VIDIOC_QUERY_EXT_CTRL, &q), guardCount < 4096 {
            guardCount += 1
            let id = q.id
            defer {
                let next = q.id
                q = v4l2_query_ext_ctrl()
                q.id = next | V4L2.ctrlFlagNextCtrl | V4L2.ctrlFlagNextCompound
            }
            if q.type == V4L2.ctrlTypeClass || q.flags & V4L2.ctrlFlagDisabled != 0 { continue }
            let kind: ControlKind
            switch q.type {
            case V4L2.ctrlTypeInteger: kind = .integer
            case V4L2.ctrlTypeBoolean: kind = .boolean
            case V4L2.ctrlTypeMenu: kind = .menu
            case V4L2.ctrlTypeIntegerMenu: kind = .integerMenu
            case V4L2.ctrlTypeButton: kind = .button
            case V4L2.ctrlTypeInteger64: kind = .integer64
            case V4L2.ctrlTypeString: kind = .string
            default: kind = .other
            }
            var menu: [Int64: String] = [:]
            if kind == .menu || kind == .integerMenu, q.minimum <= q.maximum, q.maximum - q.minimum < 256 {
                for idx in q.minimum...q.maximum {
                    var m = v4l2_querymenu()
                    m.id = id
                    m.index = UInt32(truncatingIfNeeded: idx)
                    if case .success = h.ioctl(VF_VIDIOC_QUERYMENU, &m) {
                        menu[idx] = kind == .menu ? cString(m.name) : String(m.value)
                    }
                }
            }
            let name = cString(q.name)
            out.append(KernelControl(
                descriptor: ControlDescriptor(id: id, name: controlVariableName(name), kind: kind, minimum: q.minimum, maximum: q.maximum,
                                              step: Int64(truncatingIfNeeded: q.step), defaultValue: q.default_value, menu: menu,
                                              standard: V4L2.standard(for: id), flags: flagNames(q.flags)),
                type: q.type, rawFlags: q.flags))
        }
        return out
    }

    static func flagNames(_ f: UInt32) -> Set<String> {
        var s: Set<String> = []
        if f & V4L2.ctrlFlagReadOnly != 0 { s.insert("read-only") }
        if f & V4L2.ctrlFlagInactive != 0 { s.insert("inactive") }
        if f & V4L2.ctrlFlagWriteOnly != 0 { s.insert("write-only") }
        if f & V4L2.ctrlFlagVolatile != 0 { s.insert("volatile") }
        if f & V4L2.ctrlFlagGrabbed != 0 { s.insert("grabbed") }
        return s
    }

    /// Stable identifiers (`/dev/v4l/by-id/*`, `/dev/v4l/by-path/*`) that point at `path`.
    static func stableIDs(for path: String, syscalls: any V4L2Syscalls) -> [String] {
        var ids: [String] = []
        for dir in ["/dev/v4l/by-id", "/dev/v4l/by-path"] {
            for name in syscalls.listDirectory(dir) {
                let link = dir + "/" + name
                if syscalls.resolveLink(link) == path { ids.append(link) }
            }
        }
        return ids
    }

    /// The full description of the capture node at `path`, or the reason it is not one.
    static func describe(path: String, handle h: V4L2Handle) -> Result<(DeviceInfo, V4L2Capability, [KernelControl]), DeviceError> {
        let cap: V4L2Capability
        switch h.queryCapability() {
        case .success(let c): cap = V4L2Capability(c)
        case .failure(let e): return .failure(mapOpenError(e, device: path, operation: "VIDIOC_QUERYCAP"))
        }
        guard cap.isVideoCapture else {
            let what = cap.deviceCaps & V4L2.capVideoCaptureMPlane != 0 ? "a multi-planar capture node (not supported)"
                : cap.deviceCaps & V4L2.capMetaCapture != 0 ? "a metadata node" : "not a video capture node"
            return .failure(.unknownDevice(path, reason: "\(cap.card) (\(cap.driver)): \(what)"))
        }
        let ctrls = controls(h)
        let info = DeviceInfo(id: path, name: cap.card, driver: cap.driver, bus: cap.bus,
                              stableIDs: stableIDs(for: path, syscalls: h.syscalls), formats: formats(h),
                              controls: ctrls.map(\.descriptor), isLive: true)
        return .success((info, cap, ctrls))
    }

    static func mapOpenError(_ e: Errno, device: String, operation: String) -> DeviceError {
        switch e {
        case .noEntry, .noDeviceOrAddress: return .unknownDevice(device, reason: "no such device node")
        case .noDevice: return .disconnected(device: device)
        case .permissionDenied, .notPermitted: return .permissionDenied(device: device)
        case .busy: return .busy(device: device)
        case .notTTY, .invalidArgument: return .unknownDevice(device, reason: "not a V4L2 device (\(operation): \(e))")
        default: return .io(device: device, operation: operation, errno: e.rawValue, message: e.message)
        }
    }
}

/// Opens V4L2 capture devices (`/dev/videoN`, `v4l2:/dev/videoN`, `/dev/v4l/by-id/...`) and lists them.
public struct V4L2Provider: DeviceProvider {
    public let syscalls: any V4L2Syscalls
    public let options: V4L2Camera.Options
    public let logger: Logger

    public init(syscalls: any V4L2Syscalls = LinuxSyscalls.shared, options: V4L2Camera.Options = .init(),
                logger: Logger = Logger(label: "viewfinder.v4l2")) {
        self.syscalls = syscalls
        self.options = options
        self.logger = logger
    }

    public func handles(_ device: String) -> Bool {
        device.hasPrefix("v4l2:") || device.hasPrefix("/dev/video") || device.hasPrefix("/dev/v4l/")
    }

    /// The device node path for a device string.
    public static func path(for device: String) -> String {
        device.hasPrefix("v4l2:") ? String(device.dropFirst(5)) : device
    }

    /// Opens the node. A trailing `,range=keep` (`/dev/video0,range=keep`) keeps a limited-range
    /// camera's bytes as the driver gives them (``V4L2Camera/Options/expandLimitedRange`` off);
    /// `,range=full`, the default, stretches them to full range.
    public func open(_ device: String) throws -> any CaptureSource {
        var node = device, options = self.options
        if let comma = device.lastIndex(of: ","), device[device.index(after: comma)...].hasPrefix("range=") {
            node = String(device[..<comma])
            switch device[device.index(after: comma)...].dropFirst(6) {
            case "keep": options.expandLimitedRange = false
            case "full": options.expandLimitedRange = true
            case let v: throw DeviceError.invalidDeviceOption(device: device, option: "range", reason: "'\(v)' is not keep or full")
            }
        }
        return try V4L2Camera(path: V4L2Provider.path(for: node), syscalls: syscalls, options: options, logger: logger)
    }

    /// Every video capture node under `/dev` (metadata, output, radio and touch nodes are skipped).
    public func discover() -> [DeviceInfo] {
        let nodes = syscalls.listDirectory("/dev").filter { $0.hasPrefix("video") && Int($0.dropFirst(5)) != nil }
            .sorted { Int($0.dropFirst(5))! < Int($1.dropFirst(5))! }
        var out: [DeviceInfo] = []
        for n in nodes {
            let path = "/dev/" + n
            guard case .success(let h) = V4L2Handle.open(path, syscalls: syscalls) else {
                logger.debug("skipping \(path): cannot open")
                continue
            }
            defer { h.close() }
            switch V4L2Enumerator.describe(path: path, handle: h) {
            case .success(let (info, _, _)): out.append(info)
            case .failure(let e): logger.debug("skipping \(path): \(e)")
            }
        }
        return out
    }
}

/// Renders a device's format tree the way `v4l2-ctl --list-formats-ext` does.
public func renderFormatTree(_ info: DeviceInfo) -> String {
    var s = "\(info.id): \(info.name) (driver \(info.driver), bus \(info.bus))\n"
    for id in info.stableIDs { s += "\talso: \(id)\n" }
    s += "ioctl: VIDIOC_ENUM_FMT\n\tType: Video Capture\n\n"
    func interval(_ i: FrameInterval) -> String {
        let secs = Double(i.numerator) / Double(max(i.denominator, 1))
        return "\t\t\tInterval: Discrete \(fixed(secs, 3))s (\(fixed(i.fps, 3)) fps)\n"
    }
    for (n, f) in info.formats.enumerated() {
        let comp = f.compressed ? ", compressed" : ""
        let engine = f.pixelFormat.map { " [engine: \($0)]" } ?? " [via libv4lconvert only]"
        s += "\t[\(n)]: '\(fourCCString(f.fourcc))' (\(f.description)\(comp))\(engine)\n"
        for size in f.sizes {
            switch size {
            case .discrete(let w, let h, let ivs):
                s += "\t\tSize: Discrete \(w)x\(h)\n"
                for i in ivs { s += interval(i) }
            case .stepwise(let a, let b, let sw, let c, let d, let sh, let ivs):
                s += "\t\tSize: Stepwise \(a)x\(c) - \(b)x\(d) with step \(sw)/\(sh)\n"
                for i in ivs { s += interval(i) }
            }
        }
        s += "\n"
    }
    return s
}

/// Renders a device's controls the way `v4l2-ctl --list-ctrls-menus` does.
public func renderControls(_ controls: [ControlDescriptor], values: [String: Int64] = [:]) -> String {
    var s = ""
    for c in controls {
        let hex = "0x" + String(c.id, radix: 16).leftPadded(to: 8, with: "0")
        var line = "\(c.name.leftPadded(to: 32)) \(hex) (\(c.kind.rawValue))"
        switch c.kind {
        case .integer, .integer64:
            line += " : min=\(c.minimum) max=\(c.maximum) step=\(c.step) default=\(c.defaultValue)"
        case .boolean:
            line += " : default=\(c.defaultValue)"
        case .menu, .integerMenu:
            line += " : min=\(c.minimum) max=\(c.maximum) default=\(c.defaultValue)"
        default: break
        }
        if let v = values[c.name] { line += " value=\(v)" }
        if !c.flags.isEmpty { line += " flags=\(c.flags.sorted().joined(separator: ","))" }
        if let st = c.standard, st.rawValue != c.name { line += " [\(st.rawValue)]" }
        s += line + "\n"
        for (k, v) in c.menu.sorted(by: { $0.key < $1.key }) {
            s += String(repeating: " ", count: 36) + "\(k): \(v)\n"
        }
    }
    return s
}

func fixed(_ d: Double, _ digits: Int) -> String {
    var p = 1.0
    for _ in 0..<digits { p *= 10 }
    let r = (d * p).rounded()
    let whole = Int(r / p)
    let frac = Int(abs(r) - abs(Double(whole)) * p)
    return "\(whole)." + String(frac).leftPadded(to: digits, with: "0")
}

extension String {
    func leftPadded(to n: Int, with c: Character = " ") -> String {
        count >= n ? self : String(repeating: c, count: n - count) + self
    }
}
