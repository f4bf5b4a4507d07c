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
    /// Buffers this pipeline needs in flight (``CaptureEngine/buffersNeeded(stages:consumers:options:limit:)``),
    /// 0 if unknown. A stage that holds frames for look-ahead can keep the source's own buffers
    /// when `sourceBuffers >= buffersNeeded`, and must copy otherwise.
    public var buffersNeeded: Int

    /// With `controls` and no `controlRequests`, a queue is made; whoever drives the stages applies it
    /// between frames (``ControlRequestQueue/apply(to:afterFrame:delayed:)``), as the engine does.
    public init(format: FrameFormat, frameIntervalNanoseconds: UInt64 = 0, controls: (any DeviceControlling)? = nil, controlRequests: ControlRequestQueue? = nil,
                isLive: Bool = true, sourceBuffers: Int = 0, buffersNeeded: Int = 0) {
        self.format = format
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
    public func prepare(format: FrameFormat, context: StageContext) throws {}
    public var delayFrames: Int { 0 }
    public func nextReady() -> Frame? { nil }
    public func finish() {}

    /// The option documentation, for `viewfinder stages` and DocC.
    public static var optionDocumentation: [OptionDocumentation] {
        let defaults = Options()
        return Options.fields.map { $0.documentation(defaults: defaults) }
    }

    /// Builds the stage from untyped options (JSON or the command line): unknown options and bad
    /// values are errors that name them.
    public static func make(options raw: [String: JSONValue]) throws -> any Stage {
        try Self(options: Options.decode(raw, stage: name))
    }
}

// MARK: - Options

/// Typed options of a stage. ``init()`` gives the defaults; ``fields`` describes each option (name,
/// kind, range, unit, documentation) and how to set it, so the same table validates input, fills
/// defaults and prints the documentation.
public protocol StageOptions: Sendable {
    init()
    static var fields: [OptionField<Self>] { get }
    /// Cross-field validation; throw ``ConfigurationError/invalidOption(stage:option:reason:)``.
    func validate(stage: String) throws
}

extension StageOptions {
    public func validate(stage: String) throws {}

    /// Decodes options from untyped values, starting from the defaults.
    public static func decode(_ raw: [String: JSONValue], stage: String) throws -> Self {
        var o = Self()
        let fields = Self.fields
        for (key, value) in raw.sorted(by: { $0.key < $1.key }) {
            guard let f = fields.first(where: { $0.name == key }) else {
                throw ConfigurationError.unknownOption(stage: stage, option: key, known: fields.map(\.name))
            }
            do {
                try f.apply(&o, value)
            } catch let e as OptionValueError {
                throw ConfigurationError.invalidOption(stage: stage, option: key, reason: e.reason)
            }
        }
        try o.validate(stage: stage)
        return o
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
}

/// One option of a stage: its name, type, range, unit, documentation and setter.
public struct OptionField<Root>: Sendable {
    public let name: String
    public let type: String
    public let unit: String?
    public let range: String?
    public let summary: String
    let apply: @Sendable (inout Root, JSONValue) throws -> Void
    let show: @Sendable (Root) -> String

    func documentation(defaults: Root) -> OptionDocumentation {
        OptionDocumentation(name: name, type: type, defaultValue: show(defaults), range: range, unit: unit, summary: summary)
    }

    /// A floating-point option in `range`.
    public static func double(_ name: String, _ key: WritableKeyPath<Root, Double> & Sendable, range: ClosedRange<Double>? = nil, unit: String? = nil, _ summary: String) -> Self {
        OptionField(name: name, type: "number", unit: unit, range: range.map { "\(fmt($0.lowerBound))...\(fmt($0.upperBound))" }, summary: summary, apply: { root, v in
            guard case .number(let d) = v, d.isFinite else { throw OptionValueError("expected a number, got '\(v)'") }
            if let range, !range.contains(d) { throw OptionValueError("\(fmt(d)) is outside \(fmt(range.lowerBound))...\(fmt(range.upperBound))") }
            root[keyPath: key] = d
        }, show: { fmt($0[keyPath: key]) })
    }

    /// An integer option in `range`.
    public static func int(_ name: String, _ key: WritableKeyPath<Root, Int> & Sendable, range: ClosedRange<Int>? = nil, unit: String? = nil, _ summary: String) -> Self {
        OptionField(name: name, type: "integer", unit: unit, range: range.map { "\($0.lowerBound)...\($0.upperBound)" }, summary: summary, apply: { root, v in
            guard case .number(let d) = v, d == d.rounded(), abs(d) < 1e15 else { throw OptionValueError("expected an integer, got '\(v)'") }
            let i = Int(d)
            if let range, !range.contains(i) { throw OptionValueError("\(i) is outside \(range.lowerBound)...\(range.upperBound)") }
            root[keyPath: key] = i
        }, show: { String($0[keyPath: key]) })
    }

    /// A boolean option.
    public static func bool(_ name: String, _ key: WritableKeyPath<Root, Bool> & Sendable, _ summary: String) -> Self {
        OptionField(name: name, type: "boolean", unit: nil, range: nil, summary: summary, apply: { root, v in
            guard case .bool(let b) = v else { throw OptionValueError("expected true or false, got '\(v)'") }
            root[keyPath: key] = b
        }, show: { String($0[keyPath: key]) })
    }

    /// A free string option.
    public static func string(_ name: String, _ key: WritableKeyPath<Root, String> & Sendable, _ summary: String) -> Self {
        OptionField(name: name, type: "string", unit: nil, range: nil, summary: summary, apply: { root, v in
            switch v {
            case .string(let s): root[keyPath: key] = s
            case .number, .bool: root[keyPath: key] = v.description
            default: throw OptionValueError("expected a string, got '\(v)'")
            }
        }, show: { $0[keyPath: key] })
    }

    /// One of a fixed set of names.
    public static func choice<C: OptionChoice>(_ name: String, _ key: WritableKeyPath<Root, C> & Sendable, _ summary: String) -> Self {
        let names = C.allCases.map(\.rawValue)
        return OptionField(name: name, type: "choice", unit: nil, range: names.joined(separator: "|"), summary: summary, apply: { root, v in
            guard case .string(let s) = v, let c = C(rawValue: s) else {
                throw OptionValueError("expected one of \(names.joined(separator: ", ")), got '\(v)'")
            }
            root[keyPath: key] = c
        }, show: { $0[keyPath: key].rawValue })
    }

    /// A normalised point `x/y` (or `[x, y]` in JSON), both in 0...1.
    public static func point(_ name: String, _ key: WritableKeyPath<Root, NormalizedPoint> & Sendable, _ summary: String) -> Self {
        OptionField(name: name, type: "point", unit: "normalised x/y", range: "0...1", summary: summary, apply: { root, v in
            guard case .array(let a) = v, a.count == 2, case .number(let x) = a[0], case .number(let y) = a[1],
                  (0...1).contains(x), (0...1).contains(y) else {
                throw OptionValueError("expected a point x/y with both in 0...1, got '\(v)'")
            }
            root[keyPath: key] = NormalizedPoint(x: x, y: y)
        }, show: { "\(fmt($0[keyPath: key].x))/\(fmt($0[keyPath: key].y))" })
    }

    /// A list of numbers `a/b/c` (or a JSON array).
    public static func doubles(_ name: String, _ key: WritableKeyPath<Root, [Double]> & Sendable, range: ClosedRange<Double>? = nil, unit: String? = nil, _ summary: String) -> Self {
        OptionField(name: name, type: "numbers", unit: unit, range: range.map { "\(fmt($0.lowerBound))...\(fmt($0.upperBound))" }, summary: summary, apply: { root, v in
            let items: [JSONValue]
            switch v { case .array(let a): items = a; case .number: items = [v]; default: throw OptionValueError("expected numbers a/b/c, got '\(v)'") }
            var out: [Double] = []
            for i in items {
                guard case .number(let d) = i, d.isFinite else { throw OptionValueError("expected numbers a/b/c, got '\(v)'") }
                if let range, !range.contains(d) { throw OptionValueError("\(fmt(d)) is outside \(fmt(range.lowerBound))...\(fmt(range.upperBound))") }
                out.append(d)
            }
            root[keyPath: key] = out
        }, show: { $0[keyPath: key].map(fmt).joined(separator: "/") })
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
