import Foundation

/// The stages a program knows, by name. Built from the registries the `StageRegistryPlugin`
/// generates for each target that applies it (`StageRegistry.<module>`), merged as needed.
///
/// A name belongs to one stage type: building a registry with two types of one name, or merging
/// registries that name different types alike, throws ``ConfigurationError/duplicateStage(_:types:)``.
public struct StageRegistry: Sendable {
    public private(set) var types: [String: any Stage.Type]
    /// Names that more than one type of a generated registry claims (see ``init(generated:)``).
    public private(set) var conflicts: [ConfigurationError] = []
    /// Makes the stages that carry out a device's exposure and focus modes (ViewfinderKit installs
    /// the built-in one in `StageRegistry.builtIn`); nil: the session runs no control stages.
    public var controlStages: (any DeviceControlStageProvider)?

    /// A registry of these types; two types with one name are refused.
    public init(_ types: [any Stage.Type], controlStages: (any DeviceControlStageProvider)? = nil) throws(ConfigurationError) {
        self.init(generated: types)
        self.controlStages = controlStages
        if let first = conflicts.first { throw first }
    }

    /// The registry `StageRegistryPlugin` generates for a module. It cannot throw where it is made
    /// (a global constant), so two types with one name are kept in ``conflicts`` and every use of
    /// the registry — ``type(named:)``, ``makeStage(_:)``, ``merging(_:)`` — throws the first.
    public init(generated types: [any Stage.Type]) {
        var d: [String: any Stage.Type] = [:]
        for t in types {
            if let existing = d[t.name], ObjectIdentifier(existing) != ObjectIdentifier(t) {
                conflicts.append(.duplicateStage(t.name, types: ["\(existing)", "\(t)"]))
            } else {
                d[t.name] = t
            }
        }
        self.types = d
    }

    /// Both registries together; a name that the two give to different types is refused (as are
    /// the conflicts either already had). The control stage provider is this registry's, else the
    /// other's.
    public func merging(_ other: StageRegistry) throws(ConfigurationError) -> StageRegistry {
        if let c = conflicts.first ?? other.conflicts.first { throw c }
        var r = self
        for (n, t) in other.types.sorted(by: { $0.key < $1.key }) {
            if let existing = r.types[n], ObjectIdentifier(existing) != ObjectIdentifier(t) {
                throw .duplicateStage(n, types: ["\(existing)", "\(t)"])
            }
            r.types[n] = t
        }
        if r.controlStages == nil { r.controlStages = other.controlStages }
        return r
    }

    /// This registry with `provider` making the device's control stages.
    public func withControlStages(_ provider: (any DeviceControlStageProvider)?) -> StageRegistry {
        var r = self
        r.controlStages = provider
        return r
    }

    public var names: [String] { types.keys.sorted() }

    public func type(named name: String) throws(ConfigurationError) -> any Stage.Type {
        if let c = conflicts.first { throw c }
        guard let t = types[name] else { throw .unknownStage(name, known: names) }
        return t
    }

    /// Refuses a pipeline with two enabled stages of one ``Stage/onePerPipeline`` type
    /// (`--stages focus,focus`: two focus loops moved the lens against each other).
    public func checkRepeats(_ specs: [StageSpec]) throws(ConfigurationError) {
        var seen = Set<String>()
        for s in specs where s.enabled {
            // A typed spec knows its type (registered here or not); a spec by name is looked up.
            guard let t = s.stageType ?? (try? type(named: s.name)), t.onePerPipeline else { continue }
            if !seen.insert(t.name).inserted { throw .repeatedStage(t.name) }
        }
    }

    /// Builds a stage: a typed spec builds its own type (registered or not); a spec by name is
    /// looked up here and built from its untyped options.
    public func makeStage(_ spec: StageSpec) throws -> any Stage {
        if let typed = spec.typed { return try typed.make() }
        return try type(named: spec.name).make(options: spec.options)
    }
}

/// Makes the stages that carry out a device's exposure and focus modes
/// (``DeviceSettings/exposureMode``, ``DeviceSettings/focusMode`` and the points of interest).
///
/// The session knows no stage by name: the provider builds typed stages from the settings.
/// ViewfinderKit installs one for its built-in `exposure` and `focus` stages.
public protocol DeviceControlStageProvider: Sendable {
    /// The stages for these settings, in order. `sensorPoint` maps a point of interest from the
    /// picture as the user sees it to sensor coordinates (the connection's rotation and mirroring).
    /// Return only stages whose controls `device` has (see ``CaptureDevice/isExposureModeSupported(_:)``).
    func controlStages(for settings: DeviceSettings, device: CaptureDevice,
                       sensorPoint: @Sendable (NormalizedPoint) -> NormalizedPoint) throws -> [StageSpec]
    /// The crop-and-resample step that carries out digital zoom (`CaptureDevice.videoZoomFactor`
    /// on a device without `zoom_absolute`); nil: the session offers no digital zoom.
    func makeDigitalZoom() -> (any DigitalZooming)?
}

extension DeviceControlStageProvider {
    public func makeDigitalZoom() -> (any DigitalZooming)? { nil }
}

/// Digital zoom on the stage thread: crops the centre `1/factor` of each frame and scales it back
/// to the full size, in place. Runs after the control stages, so they meter the full frame.
public protocol DigitalZooming: AnyObject {
    /// Prepares for frames of `format` (allocates once); false when the format cannot be zoomed
    /// (compressed formats: MJPEG).
    func prepare(format: FrameFormat) -> Bool
    /// Zooms `frame` by `factor` (> 1) about its centre, in place.
    func zoom(_ frame: Frame, factor: Double)
}

/// A stage to run: by name with untyped options (a pipeline file, the command line), or typed —
/// a stage type with its typed options, built afresh each time a session starts:
///
/// ```swift
/// try session.setStages([
///     .stage(StabiliseStage.self) { $0.lookahead = 15 },
///     .stage(DeadlineStage.self, options: DeadlineOptions()),
///     StageSpec(name: "focus", options: ["mode": "auto"]),
/// ])
/// ```
///
/// A typed spec also carries its name and its options as untyped values (those that differ from
/// the defaults), so it prints, compares and encodes as the same spec by name would.
public struct StageSpec: Sendable, Equatable, Codable, CustomStringConvertible {
    public var name: String
    public var options: [String: JSONValue]
    /// A disabled stage is left out of the chain (as in libcamera tuning files).
    public var enabled: Bool
    /// The typed builder, when the spec was made from a stage type.
    let typed: TypedStage?

    public init(name: String, options: [String: JSONValue] = [:], enabled: Bool = true) {
        self.name = name; self.options = options; self.enabled = enabled; self.typed = nil
    }

    /// A stage of type `S` with typed options (the type need not be in the session's registry).
    public static func stage<S: Stage>(_ type: S.Type, options: S.Options = S.Options(), enabled: Bool = true) -> StageSpec {
        StageSpec(name: S.name, options: options.encoded(), enabled: enabled, typed: TypedStage(type, options: options))
    }

    /// A stage of type `S`, its options set from the defaults by `configure`.
    public static func stage<S: Stage>(_ type: S.Type, enabled: Bool = true, _ configure: (inout S.Options) -> Void) -> StageSpec {
        var o = S.Options()
        configure(&o)
        return stage(type, options: o, enabled: enabled)
    }

    private init(name: String, options: [String: JSONValue], enabled: Bool, typed: TypedStage?) {
        self.name = name; self.options = options; self.enabled = enabled; self.typed = typed
    }

    /// Whether the spec was made from a stage type (``stage(_:options:enabled:)``).
    public var isTyped: Bool { typed != nil }

    /// The stage type of a typed spec.
    public var stageType: (any Stage.Type)? { typed?.type }

    /// The typed options of a typed spec of stage type `S`.
    public func options<S: Stage>(of type: S.Type) -> S.Options? { typed?.options as? S.Options }

    public static func == (a: StageSpec, b: StageSpec) -> Bool {
        a.name == b.name && a.options == b.options && a.enabled == b.enabled
            && a.typed.map { ObjectIdentifier($0.type) } == b.typed.map { ObjectIdentifier($0.type) }
    }

    public var description: String {
        let o = options.sorted { $0.key < $1.key }.map { ":\($0.key)=\($0.value)" }.joined()
        return name + o + (enabled ? "" : " (disabled)")
    }

    enum CodingKeys: String, CodingKey { case name, options, enabled }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        name = try c.decode(String.self, forKey: .name)
        options = try c.decodeIfPresent([String: JSONValue].self, forKey: .options) ?? [:]
        enabled = try c.decodeIfPresent(Bool.self, forKey: .enabled) ?? true
        typed = nil
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(name, forKey: .name)
        if !options.isEmpty { try c.encode(options, forKey: .options) }
        if !enabled { try c.encode(enabled, forKey: .enabled) }
    }

    /// Parses a command-line list: `exposure:mode=auto:bias=0.3,focus,deadline:max_age_ms=50`.
    /// Stages are separated by `,`; options follow the name after `:` as `key=value`.
    public static func parseList(_ text: String) throws -> [StageSpec] {
        var previous: String?
        // An empty list ('') or an empty item ('exposure,,focus', a trailing ',') is a slip, not
        // "no stage there": refused, as a stage without a name is.
        return try text.split(separator: ",", omittingEmptySubsequences: false).map { item in
            let parts = item.split(separator: ":", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard let name = parts.first, !name.isEmpty else { throw ConfigurationError.unknownStage("", known: []) }
            // `stabilise:lookahead=5,keep=0.9`: a second option after a ',' (as in device strings).
            if name.contains("="), let stage = previous {
                throw ConfigurationError.invalidOption(stage: stage, option: name,
                                                       reason: "the options of one stage are joined by ':', stages by ',' (e.g. \(stage):\(parts.joined(separator: ":")) after the stage's other options)")
            }
            previous = name
            var options: [String: JSONValue] = [:]
            for p in parts.dropFirst() {
                guard let eq = p.firstIndex(of: "="), eq != p.startIndex else {
                    throw ConfigurationError.invalidOption(stage: name, option: p, reason: "expected key=value")
                }
                let key = String(p[..<eq])
                guard options[key] == nil else { throw ConfigurationError.invalidOption(stage: name, option: key, reason: "given twice") }
                options[key] = JSONValue(commandLine: String(p[p.index(after: eq)...]))
            }
            return StageSpec(name: name, options: options)
        }
    }
}

/// A stage type with typed options: builds a fresh stage each time.
struct TypedStage: Sendable {
    let type: any Stage.Type
    let options: any OptionTable
    let make: @Sendable () throws -> any Stage

    init<S: Stage>(_ type: S.Type, options: S.Options) {
        self.type = type
        self.options = options
        self.make = {
            // The same rules as the options by name: each field's range, then the stage's own.
            do throws(OptionProblem) { try options.checkFields() } catch { throw ConfigurationError(error, stage: S.name) }
            try options.validate(stage: S.name)
            return try S(options: options)
        }
    }
}

/// A pipeline as a JSON file describes it.
///
/// ```json
/// { "device": "sim:width=1280,height=720",
///   "stages": [ { "name": "exposure", "options": { "mode": "continuous" } },
///               { "name": "focus", "enabled": false } ] }
/// ```
public struct PipelineConfiguration: Sendable, Equatable, Codable {
    public var device: String?
    public var stages: [StageSpec]
    public init(device: String? = nil, stages: [StageSpec]) { self.device = device; self.stages = stages }

    enum CodingKeys: String, CodingKey, CaseIterable { case device, stages }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        device = try c.decodeIfPresent(String.self, forKey: .device)
        stages = try c.decodeIfPresent([StageSpec].self, forKey: .stages) ?? []
    }

    /// Reads a pipeline file; every problem is a ``ConfigurationError/invalidConfigFile(path:reason:)``.
    public static func load(path: String) throws -> PipelineConfiguration {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigurationError.invalidConfigFile(path: path, reason: "cannot read the file")
        }
        if let problem = jsonProblem(in: data) { throw ConfigurationError.invalidConfigFile(path: path, reason: problem) }
        let top: JSONValue
        do { top = try JSONDecoder().decode(JSONValue.self, from: data) } catch {
            let d = Self.describe(error)
            throw ConfigurationError.invalidConfigFile(path: path, reason: d.hasPrefix("not valid JSON") ? d : "not valid JSON (\(d))")
        }
        guard case .object(let obj) = top else {
            throw ConfigurationError.invalidConfigFile(path: path, reason: "the top level must be an object with \"stages\"")
        }
        for key in obj.keys where CodingKeys(rawValue: key) == nil {
            throw ConfigurationError.invalidConfigFile(path: path, reason: "unknown key '\(key)' (expected: device, stages)")
        }
        // `{}` is most likely the wrong file or one not yet written: a pipeline of no stages says so (`"stages": []`).
        if obj.isEmpty {
            throw ConfigurationError.invalidConfigFile(path: path, reason: "names no device and no stages (for a pipeline without stages write {\"stages\": []})")
        }
        if case .array(let items)? = obj["stages"] {
            for (i, item) in items.enumerated() {
                guard case .object(let o) = item else {
                    throw ConfigurationError.invalidConfigFile(path: path, reason: "stages[\(i)] must be an object with \"name\"")
                }
                guard case .string? = o["name"] else {
                    throw ConfigurationError.invalidConfigFile(path: path, reason: "stages[\(i)] has no \"name\"")
                }
                for k in o.keys where !["name", "options", "enabled"].contains(k) {
                    throw ConfigurationError.invalidConfigFile(path: path, reason: "stages[\(i)]: unknown key '\(k)' (expected: name, options, enabled)")
                }
            }
        }
        do { return try JSONDecoder().decode(PipelineConfiguration.self, from: data) } catch {
            throw ConfigurationError.invalidConfigFile(path: path, reason: Self.describe(error))
        }
    }

    static func describe(_ error: any Error) -> String { jsonDecodingFailure(error) }
}
