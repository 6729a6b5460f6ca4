//! The generated registry: about 200 tag definitions of an e-commerce app, each with the values it takes.

use std::io::Write;

use crate::import::CSV_HEADER;
use crate::tag::{DataType, TagDef, TagStatus, ValueType};

/// The values a generated tag takes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Values {
    /// `true` with this probability.
    Bool(f64),
    /// Integers in `0..=max`, small ones far more often (counts).
    Count(i64),
    /// Integers in `min..=max`, uniform.
    Range(i64, i64),
    /// Non-negative amounts below this, two decimals, small ones more often.
    Amount(f64),
    /// A ratio in `[0, 1)`, four decimals.
    Ratio,
    /// One of these words.
    Choice(&'static [&'static str]),
    /// One to this many distinct words of these.
    Multi(&'static [&'static str], usize),
}

/// A generated tag: its definition and its values.
#[derive(Debug, Clone)]
pub(crate) struct GenTag {
    pub(crate) def: TagDef,
    pub(crate) values: Values,
}

pub(crate) const CATEGORIES: &[&str] = &[
    "beauty", "apparel", "digital", "food", "home", "baby", "sports", "books", "pets", "travel",
];
const CITIES: &[&str] = &[
    "sh", "bj", "gz", "sz", "hz", "cd", "wh", "nj", "xa", "cq", "tj", "su", "cs", "zz", "qd", "xm",
    "km", "hf", "nb", "dl",
];
const PROVINCES: &[&str] = &[
    "shanghai",
    "beijing",
    "guangdong",
    "zhejiang",
    "sichuan",
    "hubei",
    "jiangsu",
    "shaanxi",
    "chongqing",
    "tianjin",
    "hunan",
    "henan",
    "shandong",
    "fujian",
    "yunnan",
    "anhui",
];
const KEYWORDS: &[&str] = &[
    "lipstick",
    "sneakers",
    "phone case",
    "coffee",
    "air fryer",
    "diapers",
    "yoga mat",
    "novel",
    "cat food",
    "suitcase",
    "earbuds",
    "sunscreen",
    "hoodie",
    "rice cooker",
    "protein powder",
];
const BRANDS: &[&str] = &[
    "huawei", "apple", "xiaomi", "oppo", "vivo", "honor", "samsung", "oneplus", "realme",
];
const ITEMS: &[&str] = &[
    "sku-100231",
    "sku-100877",
    "sku-204511",
    "sku-310002",
    "sku-318842",
    "sku-420019",
    "sku-501337",
    "sku-602210",
    "sku-777001",
    "sku-808080",
    "sku-913370",
    "sku-990001",
];

/// A tag of the catalog (`ttl_secs` only for a short-term one).
fn tag(
    code: impl Into<String>,
    name: impl Into<String>,
    value_type: ValueType,
    values: Values,
    data_type: DataType,
    status: TagStatus,
) -> GenTag {
    let (category, owner, frequency, ttl_secs) = match value_type {
        ValueType::Dimension => ("demographic", "crm", "daily", None),
        ValueType::Statistic => ("behaviour", "data-platform", "daily", None),
        ValueType::ShortTerm => ("realtime", "reco", "realtime", Some(3600)),
    };
    GenTag {
        def: TagDef {
            tag_code: code.into(),
            name: name.into(),
            data_type,
            value_type,
            status,
            ttl_secs,
            category: category.into(),
            owner: owner.into(),
            update_frequency: frequency.into(),
        },
        values,
    }
}

fn data_type(values: Values) -> DataType {
    match values {
        Values::Bool(_) => DataType::Boolean,
        Values::Count(_) | Values::Range(..) => DataType::Int,
        Values::Amount(_) | Values::Ratio => DataType::Float,
        Values::Choice(_) => DataType::String,
        Values::Multi(..) => DataType::MultiValue,
    }
}

fn dim(code: &str, name: &str, values: Values) -> GenTag {
    tag(
        code,
        name,
        ValueType::Dimension,
        values,
        data_type(values),
        TagStatus::Online,
    )
}

fn stat(code: impl Into<String>, name: impl Into<String>, values: Values) -> GenTag {
    tag(
        code,
        name,
        ValueType::Statistic,
        values,
        data_type(values),
        TagStatus::Online,
    )
}

fn short(code: impl Into<String>, name: impl Into<String>, ttl: u64, values: Values) -> GenTag {
    let mut t = tag(
        code,
        name,
        ValueType::ShortTerm,
        values,
        data_type(values),
        TagStatus::Online,
    );
    t.def.ttl_secs = Some(ttl);
    t
}

const HOUR: u64 = 3600;
const DAY: u64 = 24 * HOUR;

/// The catalog, in a fixed order: the same for every seed (a registry is imported once and
/// then traffic of many seeds checked against it).
pub(crate) fn catalog() -> Vec<GenTag> {
    use Values::*;
    let mut tags = vec![
        dim(
            "dim_gender",
            "Gender",
            Choice(&["male", "female", "unknown"]),
        ),
        dim(
            "dim_age_band",
            "Age band",
            Choice(&["18-24", "25-34", "35-44", "45-54", "55+"]),
        ),
        dim("dim_city", "City of residence", Choice(CITIES)),
        dim("dim_province", "Province", Choice(PROVINCES)),
        dim(
            "dim_city_tier",
            "City tier",
            Choice(&["tier1", "new_tier1", "tier2", "tier3", "tier4"]),
        ),
        dim(
            "dim_member_level",
            "Membership level",
            Choice(&["normal", "silver", "gold", "platinum", "diamond"]),
        ),
        dim("dim_is_vip", "Paying VIP", Bool(0.08)),
        dim("dim_has_child", "Has a child", Bool(0.3)),
        dim("dim_is_student", "Student", Bool(0.12)),
        dim("dim_is_married", "Married", Bool(0.45)),
        dim("dim_has_car", "Owns a car", Bool(0.35)),
        dim(
            "dim_is_new_user",
            "Registered in the last 30 days",
            Bool(0.05),
        ),
        dim(
            "dim_device_os",
            "Device OS",
            Choice(&["android", "ios", "harmonyos"]),
        ),
        dim("dim_device_brand", "Device brand", Choice(BRANDS)),
        dim(
            "dim_channel",
            "Acquisition channel",
            Choice(&[
                "app_store",
                "huawei",
                "xiaomi",
                "oppo",
                "vivo",
                "web",
                "mini_program",
            ]),
        ),
        dim(
            "dim_register_year",
            "Year of registration",
            Range(2012, 2026),
        ),
        dim("dim_birth_year", "Year of birth", Range(1950, 2008)),
        dim("dim_interests", "Interests", Multi(CATEGORIES, 4)),
        dim("dim_preferred_brands", "Preferred brands", Multi(BRANDS, 3)),
        dim(
            "dim_payment_methods",
            "Payment methods",
            Multi(&["alipay", "wechat_pay", "card", "cod", "huabei"], 3),
        ),
        dim("dim_lang", "Language", Choice(&["zh-CN", "zh-TW", "en-US"])),
        dim(
            "dim_occupation",
            "Occupation",
            Choice(&[
                "office",
                "student",
                "freelance",
                "retired",
                "service",
                "other",
            ]),
        ),
        dim(
            "dim_income_band",
            "Income band, monthly",
            Choice(&["<5k", "5k-10k", "10k-20k", "20k-50k", ">50k"]),
        ),
        dim(
            "dim_education",
            "Education",
            Choice(&["high_school", "college", "bachelor", "master", "doctor"]),
        ),
        dim(
            "dim_carrier",
            "Mobile carrier",
            Choice(&["cmcc", "cucc", "ctcc"]),
        ),
        dim(
            "dim_consume_level",
            "消费水平",
            Choice(&["low", "mid", "high", "luxury"]),
        ),
        dim(
            "dim_life_stage",
            "人生阶段",
            Choice(&["single", "couple", "parent", "senior"]),
        ),
        dim(
            "dim_home_city_tier",
            "Home city tier",
            Choice(&["tier1", "tier2", "tier3", "tier4"]),
        ),
        dim("dim_is_employee", "Staff account", Bool(0.002)),
        dim("dim_is_blacklisted", "Blocked for fraud", Bool(0.001)),
        dim("dim_credit_score", "Credit score, 0 to 1", Ratio),
        dim(
            "dim_home_distance_km",
            "Home to nearest store, km",
            Amount(50.0),
        ),
    ];
    for cat in CATEGORIES {
        tags.push(dim(
            &format!("dim_likes_{cat}"),
            &format!("Likes {cat}"),
            Bool(0.25),
        ));
    }

    let windows = ["1d", "7d", "30d", "90d"];
    for action in [
        "view", "click", "cart", "fav", "buy", "refund", "share", "comment", "search", "login",
    ] {
        for w in windows {
            let max = if action == "view" { 5000 } else { 300 };
            tags.push(stat(
                format!("beh_{action}_cnt_{w}"),
                format!("{action} count, last {w}"),
                Count(max),
            ));
        }
    }
    for w in windows {
        tags.push(stat(
            format!("beh_amount_{w}"),
            format!("Amount spent, last {w}"),
            Amount(20_000.0),
        ));
        tags.push(stat(
            format!("beh_avg_order_{w}"),
            format!("Average order, last {w}"),
            Amount(2_000.0),
        ));
    }
    for cat in CATEGORIES {
        tags.push(stat(
            format!("beh_{cat}_buy_30d"),
            format!("Purchases of {cat}, last 30 days"),
            Count(50),
        ));
        tags.push(stat(
            format!("beh_{cat}_amount_30d"),
            format!("Amount on {cat}, last 30 days"),
            Amount(5_000.0),
        ));
        tags.push(stat(
            format!("beh_{cat}_view_30d"),
            format!("Views of {cat}, last 30 days"),
            Count(2_000),
        ));
        tags.push(stat(
            format!("beh_{cat}_fav_30d"),
            format!("Favourites of {cat}, last 30 days"),
            Count(100),
        ));
        tags.push(stat(
            format!("beh_{cat}_cart_30d"),
            format!("Added to cart from {cat}, last 30 days"),
            Count(100),
        ));
    }
    tags.extend([
        stat("beh_active_days_30d", "Active days, last 30", Range(0, 30)),
        stat(
            "beh_last_buy_days",
            "Days since the last purchase",
            Count(365),
        ),
        stat(
            "beh_coupon_used_90d",
            "Coupons used, last 90 days",
            Count(40),
        ),
        stat(
            "beh_session_avg_secs",
            "Average session, seconds",
            Amount(3_600.0),
        ),
        stat("beh_ctr_7d", "Click-through rate, last 7 days", Ratio),
        stat("beh_cvr_30d", "Conversion rate, last 30 days", Ratio),
        stat("beh_churn_score", "Churn score", Ratio),
        stat("beh_ltv", "Lifetime value", Amount(200_000.0)),
        stat(
            "beh_rfm_segment",
            "RFM segment",
            Choice(&[
                "champion",
                "loyal",
                "potential",
                "at_risk",
                "hibernating",
                "lost",
            ]),
        ),
        stat(
            "beh_top_cats_30d",
            "Top categories, last 30 days",
            Multi(CATEGORIES, 3),
        ),
        stat("beh_is_active_7d", "Active in the last 7 days", Bool(0.6)),
        stat("beh_is_repeat_buyer", "Bought twice or more", Bool(0.4)),
        stat(
            "beh_price_band",
            "Usual price band",
            Choice(&["budget", "mid", "premium"]),
        ),
        stat("beh_night_owl_ratio", "Share of night sessions", Ratio),
    ]);

    tags.extend([
        short("rt_last_cat", "最近浏览类目", DAY, Choice(CATEGORIES)),
        short("rt_last_search", "Last search", 6 * HOUR, Choice(KEYWORDS)),
        short("rt_last_view_item", "Last item viewed", HOUR, Choice(ITEMS)),
        short(
            "rt_cart_items",
            "Items in the cart",
            3 * DAY,
            Multi(ITEMS, 5),
        ),
        short(
            "rt_viewed_cats_1h",
            "Categories viewed, last hour",
            HOUR,
            Multi(CATEGORIES, 4),
        ),
        short("rt_active_1h", "Active in the last hour", HOUR, Bool(0.7)),
        short("rt_clicks_1h", "Clicks, last hour", HOUR, Count(200)),
        short("rt_views_1h", "Views, last hour", HOUR, Count(500)),
        short("rt_views_10m", "Views, last 10 minutes", 600, Count(100)),
        short(
            "rt_session_secs",
            "Current session, seconds",
            1800,
            Count(1800),
        ),
        short("rt_geo_city", "Current city", 6 * HOUR, Choice(CITIES)),
        short("rt_in_store", "In a physical store", 1800, Bool(0.03)),
        short(
            "rt_coupon_pending",
            "Holds an unused coupon",
            DAY,
            Bool(0.2),
        ),
        short(
            "rt_price_sensitivity",
            "Price sensitivity, this week",
            7 * DAY,
            Ratio,
        ),
        short(
            "rt_last_channel",
            "Last entry channel",
            2 * HOUR,
            Choice(&["push", "search", "feed", "ad", "share", "direct"]),
        ),
        short("rt_push_opened_1d", "Opened a push today", DAY, Bool(0.15)),
        short(
            "rt_live_watching",
            "Watching a live stream",
            900,
            Bool(0.05),
        ),
        short("rt_cart_amount", "Cart amount", 3 * DAY, Amount(3_000.0)),
    ]);
    for cat in CATEGORIES {
        tags.push(short(
            format!("rt_{cat}_views_1d"),
            format!("Views of {cat}, today"),
            DAY,
            Count(100),
        ));
    }

    // Tags that no good event writes: gray ones (written for test users only) and offline ones;
    // the bad events use them.
    let mut gray = |code: &str, name: &str, vt: ValueType, values: Values, status: TagStatus| {
        let mut t = tag(code, name, vt, values, data_type(values), status);
        if vt == ValueType::ShortTerm {
            t.def.ttl_secs = Some(HOUR);
        }
        tags.push(t);
    };
    gray(
        "beh_new_model_score",
        "Propensity score, model v2",
        ValueType::Statistic,
        Ratio,
        TagStatus::Gray,
    );
    gray(
        "rt_banner_variant",
        "Banner experiment arm",
        ValueType::ShortTerm,
        Choice(&["a", "b", "c"]),
        TagStatus::Gray,
    );
    gray(
        "dim_kyc_level",
        "KYC level",
        ValueType::Dimension,
        Range(0, 3),
        TagStatus::Gray,
    );
    gray(
        "beh_video_watch_7d",
        "Video minutes, last 7 days",
        ValueType::Statistic,
        Count(600),
        TagStatus::Gray,
    );
    gray(
        "beh_old_score_v1",
        "Propensity score, model v1",
        ValueType::Statistic,
        Ratio,
        TagStatus::Offline,
    );
    gray(
        "dim_legacy_segment",
        "Legacy segment",
        ValueType::Dimension,
        Choice(&["s1", "s2", "s3"]),
        TagStatus::Offline,
    );
    gray(
        "rt_old_feed_pos",
        "Feed position (old app)",
        ValueType::ShortTerm,
        Count(100),
        TagStatus::Offline,
    );
    gray(
        "beh_sms_clicks_90d",
        "SMS clicks, last 90 days",
        ValueType::Statistic,
        Count(20),
        TagStatus::Offline,
    );
    tags
}

/// The generated registry: the definitions of [`super::EventGenerator`]'s tags, about 200 over
/// the three value types and five data types, most online, a few gray and offline.
pub fn registry() -> Vec<TagDef> {
    catalog().into_iter().map(|t| t.def).collect()
}

/// Writes `tags` as a registry CSV (header [`CSV_HEADER`]), what `hourglass tags import`
/// reads.
///
/// # Errors
///
/// The writer's error.
pub fn write_registry_csv<W: Write>(out: W, tags: &[TagDef]) -> std::io::Result<()> {
    let mut csv = csv::Writer::from_writer(out);
    csv.write_record(CSV_HEADER)?;
    for t in tags {
        let ttl = t.ttl_secs.map(|s| s.to_string()).unwrap_or_default();
        csv.write_record([
            t.tag_code.as_str(),
            &t.name,
            t.data_type.as_str(),
            t.value_type.as_str(),
            t.status.as_str(),
            &ttl,
            &t.category,
            &t.owner,
            &t.update_frequency,
        ])?;
    }
    csv.flush()
}
