/// What a stage decided about a frame.
public enum StageVerdict: Sendable, Equatable {
    /// Pass the frame on to the next stage.
    case forward
    /// Drop the frame; it is counted under `reason` (usually ``DropReason/stage`` or ``DropReason/late``).
    case drop(DropReason)
    /// The stage keeps the frame and hands it on later through ``Stage/nextReady()`` — for stages
    /// with look-ahead. The engine's hold passes to the stage and the engine keeps track of it: the
    /// stage never counts references, and a frame it never hands back is reclaimed by the engine
    /// (counted as a ``DropReason/stage`` drop and in ``StageChain/reclaimed``) rather than leaked —
    /// at ``Stage/finish()``, or earlier when the stage holds more than its ``Stage/delayFrames``
    /// plus ``StageChain/holdSlack`` frames.
    case hold
}

/// What a stage may use besides the frame: the device it can drive and the stream's timing.
///
/// Given once, in ``Stage/prepare(format:context:)``; the stage keeps what it needs.
public struct StageContext: Sendable {
    /// The format frames will have.
    public var format: FrameFormat
    /// Nominal time between frames, ns (0 if unknown).
    public var frameIntervalNanoseconds: UInt64
    /// The device's controls, when the source is a device the stage may drive: descriptors and
    /// current values, for ``Stage/prepare(format:context:)``. While frames flow, a stage changes
    /// controls through ``controlRequests`` and reads the values each frame was exposed with from
    /// its metadata (``FrameMetadata/exposedWith``), never with a device call.
    public var controls: (any DeviceControlling)?
    /// Where a stage queues control changes from ``Stage/process(_:)``: lock-free, no allocation;
    /// the capture side writes them between frames. Present whenever ``controls`` is.
    public var controlRequests: ControlRequestQueue?
    /// Whether the source is live (paced by a clock) or not (a file, an unpaced simulation).
    public var isLive: Bool
    /// Buffers the source really has (a driver may grant fewer than asked), 0 if unknown.
    public var sourceBuffers: Int
    /// Buffers this pipeline needs in flight (``CaptureEngine/buffersNeeded(stages:consumers:options:limit:pixelFormat:)``),
    /// 0 if unknown. A stage that holds frames for look-ahead can keep the source's own buffers
    /// when `sourceBuffers >= buffersNeeded`, and must copy otherwise.
    public var buffersNeeded: Int
    /// Where the stage declares what pixels it needs (``PixelNeed``). On MJPEG, RGB and Bayer
    /// streams the engine then gives each frame one decoded view (``Frame/pixels``), shared by
    /// every stage, at the smallest size that serves them all. On YUV formats it costs nothing.
    public var pixels: PixelRequests
    /// Frames of look-ahead the stages before this one hold (the sum of their
    /// ``Stage/delayFrames``): a frame reaches this stage at least that many frame intervals after
    /// its capture. Set by the chain as it prepares each stage.
    public var upstreamDelayFrames: Int = 0

    /// With `controls` and no `controlRequests`, a queue is made; whoever drives the stages applies it
    /// between frames (``ControlRequestQueue/apply(to:afterFrame:delayed:)``), as the engine does.
    public init(format: FrameFormat, frameIntervalNanoseconds: UInt64 = 0, controls: (any DeviceControlling)? = nil, controlRequests: ControlRequestQueue? = nil,
                isLive: Bool = true, sourceBuffers: Int = 0, buffersNeeded: Int = 0, pixels: PixelRequests? = nil) {
        self.format = format
        self.pixels = pixels ?? PixelRequests(format: format, available: format.pixelFormat.hasYUVPlanes || RGBBayerConverter.handles(format.pixelFormat))
        self.frameIntervalNanoseconds = frameIntervalNanoseconds
        self.controls = controls
        self.controlRequests = controlRequests ?? (controls == nil ? nil : ControlRequestQueue())
        self.isLive = isLive
        self.sourceBuffers = sourceBuffers
        self.buffersNeeded = buffersNeeded
    }

    /// Whether the source has buffers enough for this pipeline's look-ahead and rings (false when
    /// either count is unknown).
    public var sourceHasBuffersToSpare: Bool { sourceBuffers > 0 && buffersNeeded > 0 && sourceBuffers >= buffersNeeded }
}

/// A processing stage: one step of the chain that runs on the stage thread.
///
/// A stage declares its typed ``Options`` (with defaults and documentation), is built from them,
/// prepared once when the format is known, and then sees every frame in order on one thread.
/// `process` works on the frame in place and says what should happen to it. It must not block and
/// must not allocate in steady state.
///
/// To register a stage, put the type in a file of a target that applies `StageRegistryPlugin`:
/// the plugin finds it and adds it to that target's generated registry.
///
/// Stages are confined to the stage thread: they need not be `Sendable`.
public protocol Stage: AnyObject, SendableMetatype {
    associatedtype Options: StageOptions

    /// The name pipelines use (`exposure`, `focus`, …). Lower case, unique.
    static var name: String { get }
    /// One line on what the stage does.
    static var summary: String { get }
    /// True for a stage that closes a loop over the camera's controls (exposure, focus, white
    /// balance): a pipeline holds at most one (enabled) of it, since two would fight. Default false.
    static var onePerPipeline: Bool { get }

    init(options: Options) throws

    /// Called once before the first frame (and again if the format changes).
    func prepare(format: FrameFormat, context: StageContext) throws

    /// Processes one frame in place. The frame is lent for the call; answer
    /// ``StageVerdict/hold`` to keep it.
    func process(_ frame: Frame) -> StageVerdict

    /// Frames of delay the stage introduces (look-ahead). Timestamps are not changed by the delay.
    var delayFrames: Int { get }

    /// A held frame that is ready to go on, oldest first; nil when none is. Only frames the stage
    /// holds (answered ``StageVerdict/hold`` for and not yet handed back) go on; anything else is
    /// ignored and counted (``StageChain/misreturned``), so handing a frame back twice does nothing.
    func nextReady() -> Frame?

    /// Called at the end of the stream: afterwards ``nextReady()`` must give back every held frame.
    func finish()
}

extension Stage {
    public static var onePerPipeline: Bool { false }
    public func prepare(format: FrameFormat, context: StageContext) throws {}
    public var delayFrames: Int { 0 }
    public func nextReady() -> Frame? { nil }
    public func finish() {}

    /// The option documentation, for `viewfinder stages` and DocC.
    public static var optionDocumentation: [OptionDocumentation] { Options.documentation }

    /// Builds the stage from untyped options (JSON or the command line): unknown options and bad
    /// values are errors that name them.
    public static func make(options raw: [String: JSONValue]) throws -> any Stage {
        try Self(options: Options.decode(raw, stage: name))
    }
}

// MARK: - Options

/// A table of typed options: ``init()`` gives the defaults; ``fields`` describes each option (name,
/// kind, range, unit, documentation) and how to set and show it, so the same table validates
/// input, fills defaults, prints the documentation and writes the values back out.
///
/// Stages' options (``StageOptions``) and devices' options (``DeviceOptionTable``: the sim camera,
/// the test pattern, dump replay) are both option tables, so every option on the command line, in
/// a pipeline file or in a device string is parsed, refused and documented the same way.
public protocol OptionTable: Sendable {
    init()
    static var fields: [OptionField<Self>] { get }
}

/// What is wrong with one option, before it is said whose option it is.
public enum OptionProblem: Error, Equatable, Sendable {
    /// No option has this name.
    case unknown(option: String, known: [String])
    /// The value does not fit the option.
    case invalid(option: String, reason: String)
}

extension OptionTable {
    /// Decodes options from untyped values, starting from the defaults; the first problem is thrown
    /// as an ``OptionProblem``.
    public static func decodeTable(_ raw: [String: JSONValue]) throws(OptionProblem) -> Self {
        var o = Self()
        let fields = Self.fields
        for (key, value) in raw.sorted(by: { $0.key < $1.key }) {
            guard let f = fields.first(where: { $0.name == key }) else {
                throw .unknown(option: key, known: fields.map(\.name))
            }
            do { try f.apply(&o, value) } catch let e as OptionValueError {
                throw .invalid(option: key, reason: e.reason)
            } catch {
                throw .invalid(option: key, reason: "\(error)")
            }
        }
        return o
    }

    /// Holds options set in code to the rules the same values given as text would meet (each
    /// field's range, a finite number, a point within 0...1): every field's value is read back
    /// through its own parser. A typed spec (`StageSpec.stage(_:options:enabled:)`) is checked so
    /// before its stage is made, as a spec by name is when it is decoded.
    public func checkFields() throws(OptionProblem) {
        var scratch = self
        for f in Self.fields {
            do { try f.apply(&scratch, f.encode(self)) } catch let e as OptionValueError {
                throw .invalid(option: f.name, reason: e.reason)
            } catch {
                throw .invalid(option: f.name, reason: "\(error)")
            }
        }
    }

    /// The documentation of every option, with the defaults of ``init()``.
    public static var documentation: [OptionDocumentation] {
        let defaults = Self()
        return fields.map { $0.documentation(defaults: defaults) }
    }

    /// The options as untyped values (what ``decodeTable(_:)`` reads back); with `changedOnly`,
    /// only those that differ from the defaults.
    public func encoded(changedOnly: Bool = true) -> [String: JSONValue] {
        let defaults = Self()
        var out: [String: JSONValue] = [:]
        for f in Self.fields {
            let v = f.encode(self)
            if !changedOnly || v != f.encode(defaults) { out[f.name] = v }
        }
        return out
    }

    /// Splits `key=value,key=value` (as in device strings) into untyped values. Values stay
    /// strings: each option's field reads its own kind from the text.
    public static func keyValues(_ text: Substring, separator: Character = ",") throws(OptionProblem) -> [String: JSONValue] {
        var out: [String: JSONValue] = [:]
        for item in text.split(separator: separator, omittingEmptySubsequences: true) {
            guard let eq = item.firstIndex(of: "="), eq != item.startIndex else {
                throw .invalid(option: String(item), reason: "expected key=value")
            }
            let key = item[..<eq].lowercased()
            guard out[key] == nil else { throw .invalid(option: key, reason: "given twice") }
            out[key] = .string(String(item[item.index(after: eq)...]))
        }
        return out
    }
}

/// Typed options of a stage (an ``OptionTable`` with a stage's cross-field validation).
public protocol StageOptions: OptionTable {
    /// Cross-field validation; throw ``ConfigurationError/invalidOption(stage:option:reason:)``.
    func validate(stage: String) throws
}

extension StageOptions {
    public func validate(stage: String) throws {}

    /// Decodes options from untyped values, starting from the defaults: unknown options and bad
    /// values are ``ConfigurationError``s that name the stage and the option.
    public static func decode(_ raw: [String: JSONValue], stage: String) throws -> Self {
        let o: Self
        do throws(OptionProblem) { o = try decodeTable(raw) } catch { throw ConfigurationError(error, stage: stage) }
        try o.validate(stage: stage)
        return o
    }
}

/// Typed options of a device opened by a string (`sim:…`, `pattern:…`, `dump:FILE,…`): an
/// ``OptionTable`` with the device's cross-field validation.
public protocol DeviceOptionTable: OptionTable {
    /// Cross-field validation; throw ``OptionProblem/invalid(option:reason:)``.
    func validate() throws(OptionProblem)
}

extension DeviceOptionTable {
    public func validate() throws(OptionProblem) {}

    /// Decodes options from untyped values: every problem is a
    /// ``DeviceError/invalidDeviceOption(device:option:reason:)`` naming the device and the option.
    public static func decode(_ raw: [String: JSONValue], device: String) throws(DeviceError) -> Self {
        do throws(OptionProblem) {
            let o = try decodeTable(raw)
            try o.validate()
            return o
        } catch { throw DeviceError(error, device: device) }
    }

    /// Decodes the `key=value,…` part of a device string.
    public static func decode(keyValues text: Substring, device: String) throws(DeviceError) -> Self {
        let raw: [String: JSONValue]
        do throws(OptionProblem) { raw = try keyValues(text) } catch { throw DeviceError(error, device: device) }
        return try decode(raw, device: device)
    }
}

extension ConfigurationError {
    /// The problem with an option of `stage`.
    public init(_ problem: OptionProblem, stage: String) {
        switch problem {
        case .unknown(let o, let known): self = .unknownOption(stage: stage, option: o, known: known)
        case .invalid(let o, let r): self = .invalidOption(stage: stage, option: o, reason: r)
        }
    }
}

extension DeviceError {
    /// The problem with an option of `device`.
    public init(_ problem: OptionProblem, device: String) {
        switch problem {
        case .unknown(let o, let known): self = .invalidDeviceOption(device: device, option: o, reason: "unknown option (known: \(known.joined(separator: ", ")))")
        case .invalid(let o, let r): self = .invalidDeviceOption(device: device, option: o, reason: r)
        }
    }
}

/// A value that does not fit its option.
public struct OptionValueError: Error { public let reason: String; public init(_ r: String) { reason = r } }

/// A string-valued option choice: an enum with a raw `String` value.
public protocol OptionChoice: RawRepresentable, CaseIterable, Sendable where RawValue == String {}

/// How one option is documented.
public struct OptionDocumentation: Sendable, Codable, Equatable {
    public var name: String
    public var type: String
    public var defaultValue: String
    public var range: String?
    public var unit: String?
    public var summary: String

    enum CodingKeys: String, CodingKey { case name, type, defaultValue = "default", range, unit, summary }
}

/// One option of a stage or a device: its name, type, range, unit, documentation, setter and value.
///
/// Every setter takes typed JSON (a pipeline file) as well as text (a device string, or a command
/// line), so `3`, `"3"` and `3.0` all set an integer option to 3, and `0.3/0.6` or `[0.3, 0.6]` a point.
public struct OptionField<Root>: Sendable {
    public let name: String
    public let type: String
    public let unit: String?
    public let range: String?
    public let summary: String
    let apply: @Sendable (inout Root, JSONValue) throws -> Void
    let show: @Sendable (Root) -> String
    let encode: @Sendable (Root) -> JSONValue

    /// A field of any kind: `parse` reads a value (throwing ``OptionValueError`` with the reason),
    /// `show` writes it for the documentation and `encode` as JSON.
    public init<Value>(name: String, type: String, unit: String? = nil, range: String? = nil, summary: String,
                       key: WritableKeyPath<Root, Value> & Sendable,
                       parse: @escaping @Sendable (JSONValue) throws -> Value,
                       show: @escaping @Sendable (Value) -> String,
                       encode: @escaping @Sendable (Value) -> JSONValue) {
        self.name = name; self.type = type; self.unit = unit; self.range = range; self.summary = summary
        self.apply = { root, v in root[keyPath: key] = try parse(v) }
        self.show = { show($0[keyPath: key]) }
        self.encode = { encode($0[keyPath: key]) }
    }

    func documentation(defaults: Root) -> OptionDocumentation {
        OptionDocumentation(name: name, type: type, defaultValue: show(defaults), range: range, unit: unit, summary: summary)
    }

    /// A floating-point option in `range`.
    public static func double(_ name: String, _ key: WritableKeyPath<Root, Double> & Sendable, range: ClosedRange<Double>? = nil, unit: String? = nil, _ summary: String) -> Self {
        OptionField(name: name, type: "number", unit: unit, range: range.map { "\(fmt($0.lowerBound))...\(fmt($0.upperBound))" }, summary: summary, key: key, parse: { v in
            guard let d = v.numberValue, d.isFinite else { throw OptionValueError("expected a number, got '\(v)'") }
            if let range, !range.contains(d) { throw OptionValueError("\(fmt(d)) is outside \(fmt(range.lowerBound))...\(fmt(range.upperBound))") }
            return d
        }, show: fmt, encode: { .number($0) })
    }

    /// An integer option in `range` (any integer type).
    public static func int<I: FixedWidthInteger & Sendable>(_ name: String, _ key: WritableKeyPath<Root, I> & Sendable, range: ClosedRange<I>? = nil, unit: String? = nil, _ summary: String) -> Self {
        OptionField(name: name, type: "integer", unit: unit, range: range.map { "\($0.lowerBound)...\($0.upperBound)" }, summary: summary, key: key, parse: { v in
            let parsed: I?
            if case .string(let s) = v { parsed = I(s) } else if let d = v.numberValue, d == d.rounded(), abs(d) < 1e15 { parsed = I(exactly: d) } else { parsed = nil }
            var value = parsed
            // A whole number in another notation ("1e3", "10.0") is the integer it names, as a
            // JSON number is.
            let whole: Double? = if case .string(let s) = v { Double(s) } else { v.numberValue }
            if value == nil, let whole, whole.isFinite, whole == whole.rounded(), abs(whole) < 1e15 { value = I(exactly: whole) }
            guard let i = value else {
                // A whole number the type cannot hold (-1 for a count, 1e20) is out of range, not "not an integer".
                if let whole, whole.isFinite, whole == whole.rounded() {
                    let shown = abs(whole) < 1e15 ? String(Int64(whole)) : fmt(whole)
                    if let range { throw OptionValueError("\(shown) is outside \(range.lowerBound)...\(range.upperBound)") }
                    throw OptionValueError("\(shown) is outside \(I.min)...\(I.max)")
                }
                throw OptionValueError("expected an integer, got '\(v)'")
            }
            if let range, !range.contains(i) { throw OptionValueError("\(i) is outside \(range.lowerBound)...\(range.upperBound)") }
            return i
        }, show: { String($0) }, encode: { i in
            // Beyond 1e15 a double may not hold the integer: as text it reads back exactly.
            let d = Double(i)
            return abs(d) < 1e15 ? .number(d) : .string(String(i))
        })
    }

    /// A boolean option.
    public static func bool(_ name: String, _ key: WritableKeyPath<Root, Bool> & Sendable, _ summary: String) -> Self {
        OptionField(name: name, type: "boolean", summary: summary, key: key, parse: { v in
            switch v {
            case .bool(let b): return b
            case .string(let s) where ["true", "false"].contains(s.lowercased()): return s.lowercased() == "true"
            default: throw OptionValueError("expected true or false, got '\(v)'")
            }
        }, show: { String($0) }, encode: { .bool($0) })
    }

    /// A free string option.
    public static func string(_ name: String, _ key: WritableKeyPath<Root, String> & Sendable, _ summary: String) -> Self {
        OptionField(name: name, type: "string", summary: summary, key: key, parse: { v in
            switch v {
            case .string(let s): return s
            case .number, .bool: return v.description
            default: throw OptionValueError("expected a string, got '\(v)'")
            }
        }, show: { $0 }, encode: { .string($0) })
    }

    /// A file path; empty (or absent) means none.
    public static func path(_ name: String, _ key: WritableKeyPath<Root, String?> & Sendable, _ summary: String) -> Self {
        OptionField(name: name, type: "path", summary: summary, key: key, parse: { v in
            guard case .string(let s) = v else { throw OptionValueError("expected a file path, got '\(v)'") }
            return s.isEmpty ? nil : s
        }, show: { $0 ?? "none" }, encode: { .string($0 ?? "") })
    }

    /// One of a fixed set of names.
    public static func choice<C: OptionChoice>(_ name: String, _ key: WritableKeyPath<Root, C> & Sendable, _ summary: String) -> Self {
        let names = C.allCases.map(\.rawValue)
        return OptionField(name: name, type: "choice", range: names.joined(separator: "|"), summary: summary, key: key, parse: { v in
            guard case .string(let s) = v, let c = C(rawValue: s) else {
                throw OptionValueError("expected one of \(names.joined(separator: ", ")), got '\(v)'")
            }
            return c
        }, show: { $0.rawValue }, encode: { .string($0.rawValue) })
    }

    /// A pixel format among `allowed` (by any of its names: `yuyv`, `yuy2`, …).
    public static func pixelFormat(_ name: String, _ key: WritableKeyPath<Root, PixelFormat> & Sendable, allowed: [PixelFormat], _ summary: String) -> Self {
        let names = allowed.map(\.rawValue)
        return OptionField(name: name, type: "choice", range: names.joined(separator: "|"), summary: summary, key: key, parse: { v in
            guard case .string(let s) = v, let f = PixelFormat(name: s), allowed.contains(f) else {
                throw OptionValueError("expected one of \(names.joined(separator: ", ")), got '\(v)'")
            }
            return f
        }, show: { $0.rawValue }, encode: { .string($0.rawValue) })
    }

    /// A normalised point `x/y` (or `[x, y]` in JSON), both in 0...1.
    public static func point(_ name: String, _ key: WritableKeyPath<Root, NormalizedPoint> & Sendable, _ summary: String) -> Self {
        OptionField(name: name, type: "point", unit: "normalised x/y", range: "0...1", summary: summary, key: key, parse: { v in
            guard let a = v.numbers, a.count == 2, (0...1).contains(a[0]), (0...1).contains(a[1]) else {
                throw OptionValueError("expected a point x/y with both in 0...1, got '\(v)'")
            }
            return NormalizedPoint(x: a[0], y: a[1])
        }, show: { "\(fmt($0.x))/\(fmt($0.y))" }, encode: { .array([.number($0.x), .number($0.y)]) })
    }

    /// A list of numbers `a/b/c` (or a JSON array).
    public static func doubles(_ name: String, _ key: WritableKeyPath<Root, [Double]> & Sendable, range: ClosedRange<Double>? = nil, unit: String? = nil, _ summary: String) -> Self {
        OptionField(name: name, type: "numbers", unit: unit, range: range.map { "\(fmt($0.lowerBound))...\(fmt($0.upperBound))" }, summary: summary, key: key, parse: { v in
            guard let out = v.numbers, out.allSatisfy(\.isFinite) else { throw OptionValueError("expected numbers a/b/c, got '\(v)'") }
            if let range, let d = out.first(where: { !range.contains($0) }) {
                throw OptionValueError("\(fmt(d)) is outside \(fmt(range.lowerBound))...\(fmt(range.upperBound))")
            }
            return out
        }, show: { $0.map(fmt).joined(separator: "/") }, encode: { .array($0.map { .number($0) }) })
    }
}

extension JSONValue {
    /// The value as a number: a JSON number, or text that reads as one.
    var numberValue: Double? {
        switch self {
        case .number(let d): return d
        case .string(let s): return Double(s)
        default: return nil
        }
    }

    /// The value as a list of numbers: a JSON array of numbers, one number, or text `a/b/c`.
    var numbers: [Double]? {
        switch self {
        case .array(let a):
            let ds = a.compactMap(\.numberValue)
            return ds.count == a.count ? ds : nil
        case .number(let d): return [d]
        case .string(let s):
            let ds = s.split(separator: "/", omittingEmptySubsequences: false).compactMap { Double($0) }
            return ds.isEmpty || s.split(separator: "/", omittingEmptySubsequences: false).count != ds.count ? nil : ds
        default: return nil
        }
    }
}

/// A point in normalised picture coordinates: (0,0) top-left, (1,1) bottom-right of the picture as
/// the user sees it.
public struct NormalizedPoint: Sendable, Equatable, Codable {
    public var x: Double
    public var y: Double
    public init(x: Double, y: Double) { self.x = x; self.y = y }
    public static let center = NormalizedPoint(x: 0.5, y: 0.5)
}

/// Options for a stage that has none.
public struct NoOptions: StageOptions {
    public init() {}
    public static var fields: [OptionField<NoOptions>] { [] }
}

@usableFromInline
func fmt(_ d: Double) -> String {
    if d == d.rounded() && abs(d) < 1e15 { return String(Int64(d)) }
    return String(d)
}
