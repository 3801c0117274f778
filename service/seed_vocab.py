"""Vocabulary for the synthetic seed: names, institutions, specialties, devices, regulators.

Plain tuples, built once at import, so that generating a row is a few `rng.choice` calls.
Institutions and regulators are real; people, brands and companies are invented.
"""

from __future__ import annotations

# The activity tables' enums are defined once, beside their writes.
from service.store.activity import ATTENDEE_ROLES, EVENT_TYPES, INTERACTION_TYPES, RSVP_STATUSES  # noqa: F401

FIRST_NAMES = (
    "James", "Mary", "Robert", "Patricia", "John", "Jennifer", "Michael", "Linda", "David", "Elizabeth",
    "William", "Barbara", "Richard", "Susan", "Thomas", "Jessica", "Christopher", "Sarah", "Daniel", "Karen",
    "Matthew", "Nancy", "Anthony", "Lisa", "Mark", "Margaret", "Steven", "Emily", "Andrew", "Michelle",
    "Joshua", "Amanda", "Kevin", "Melissa", "Brian", "Rebecca", "Eric", "Laura", "Jonathan", "Rachel",
    "Anna", "Lukas", "Sophie", "Maximilian", "Lena", "Felix", "Katharina", "Jonas", "Julia", "Tobias",
    "Marie", "Florian", "Johanna", "Sebastian", "Clara", "Pierre", "Camille", "Antoine", "Claire", "Julien",
    "Isabelle", "Nicolas", "Céline", "Mathieu", "Amélie", "Giulia", "Marco", "Francesca", "Luca", "Chiara",
    "Alessandro", "Elena", "Matteo", "Sofia", "Lorenzo", "Carmen", "Javier", "Lucía", "Alejandro", "Pablo",
    "Marta", "Diego", "Erik", "Astrid", "Lars", "Ingrid", "Anders", "Sigrid", "Magnus", "Freja",
    "Johan", "Karin", "Pieter", "Sanne", "Daan", "Femke", "Wei", "Li", "Jun", "Xiaoming",
    "Mei", "Hao", "Yan", "Hiroshi", "Yuki", "Takeshi", "Haruka", "Kenji", "Aiko", "Satoshi",
    "Priya", "Rahul", "Ananya", "Arjun", "Deepa", "Vikram", "Kavya", "Sanjay", "Min-jun", "Ji-woo",
    "Seo-yeon", "Oliver", "Charlotte", "Harry", "Amelia", "George", "Olivia", "Jack", "Isla", "Noah",
    "Chloe", "Liam", "Grace", "Ethan", "Ava", "Mohammed", "Fatima", "Omar", "Layla", "Yusuf",
    "Aisha", "Rafael", "Beatriz", "Tiago", "Inês", "Gabriel", "Mariana", "Aleksander", "Zofia", "Piotr",
)

LAST_NAMES = (
    "Smith", "Johnson", "Williams", "Brown", "Jones", "Garcia", "Miller", "Davis", "Rodriguez", "Martinez",
    "Wilson", "Anderson", "Taylor", "Thomas", "Moore", "Jackson", "Martin", "Lee", "Thompson", "White",
    "Harris", "Clark", "Lewis", "Robinson", "Walker", "Young", "Allen", "King", "Wright", "Scott",
    "Müller", "Schmidt", "Schneider", "Fischer", "Weber", "Meyer", "Wagner", "Becker", "Schulz", "Hoffmann",
    "Koch", "Richter", "Klein", "Wolf", "Schröder", "Neumann", "Braun", "Zimmermann", "Krüger", "Hartmann",
    "Dubois", "Lefèvre", "Moreau", "Laurent", "Simon", "Michel", "Bernard", "Petit", "Durand", "Fontaine",
    "Rossi", "Russo", "Ferrari", "Esposito", "Bianchi", "Romano", "Colombo", "Ricci", "Marino", "Greco",
    "Fernández", "González", "López", "Sánchez", "Pérez", "Gómez", "Ruiz", "Díaz", "Moreno", "Álvarez",
    "Andersson", "Johansson", "Karlsson", "Nilsson", "Eriksson", "Larsson", "Olsson", "Persson", "Lindqvist", "Berg",
    "de Vries", "van Dijk", "Bakker", "Janssen", "Visser", "Smit", "Meijer", "de Boer", "Mulder", "Bos",
    "Wang", "Zhang", "Liu", "Chen", "Yang", "Huang", "Zhao", "Wu", "Zhou", "Xu",
    "Sato", "Suzuki", "Takahashi", "Tanaka", "Watanabe", "Ito", "Yamamoto", "Nakamura", "Kobayashi", "Kato",
    "Sharma", "Patel", "Gupta", "Singh", "Kumar", "Reddy", "Iyer", "Nair", "Mehta", "Rao",
    "Kim", "Park", "Choi", "Jung", "Kang", "Nguyen", "Tran", "O'Brien", "Murphy", "Kelly",
    "Silva", "Santos", "Oliveira", "Costa", "Pereira", "Kowalski", "Nowak", "Wiśniewski", "Haddad", "Khalil",
)

# name, city, state, postal_code, street, country, email domain, phone prefix
INSTITUTIONS = (
    ("Mayo Clinic", "Rochester", "MN", "55905", "200 First St SW", "US", "mayo.edu", "+1 507"),
    ("Cleveland Clinic", "Cleveland", "OH", "44195", "9500 Euclid Ave", "US", "ccf.org", "+1 216"),
    ("Massachusetts General Hospital", "Boston", "MA", "02114", "55 Fruit St", "US", "mgh.harvard.edu", "+1 617"),
    ("Johns Hopkins Hospital", "Baltimore", "MD", "21287", "1800 Orleans St", "US", "jhmi.edu", "+1 410"),
    ("Cedars-Sinai Medical Center", "Los Angeles", "CA", "90048", "8700 Beverly Blvd", "US", "cshs.org", "+1 310"),
    ("Stanford Health Care", "Stanford", "CA", "94305", "300 Pasteur Dr", "US", "stanford.edu", "+1 650"),
    ("Mount Sinai Hospital", "New York", "NY", "10029", "1468 Madison Ave", "US", "mountsinai.org", "+1 212"),
    ("NewYork-Presbyterian Hospital", "New York", "NY", "10032", "622 W 168th St", "US", "nyp.org", "+1 212"),
    ("Houston Methodist Hospital", "Houston", "TX", "77030", "6565 Fannin St", "US", "houstonmethodist.org", "+1 713"),
    ("Brigham and Women's Hospital", "Boston", "MA", "02115", "75 Francis St", "US", "bwh.harvard.edu", "+1 617"),
    ("Northwestern Memorial Hospital", "Chicago", "IL", "60611", "251 E Huron St", "US", "nm.org", "+1 312"),
    ("Duke University Hospital", "Durham", "NC", "27710", "2301 Erwin Rd", "US", "duke.edu", "+1 919"),
    ("Toronto General Hospital", "Toronto", "ON", "M5G 2C4", "200 Elizabeth St", "CA", "uhn.ca", "+1 416"),
    ("Montreal Heart Institute", "Montréal", "QC", "H1T 1C8", "5000 Rue Bélanger", "CA", "icm-mhi.org", "+1 514"),
    ("Charité – Universitätsmedizin Berlin", "Berlin", "Berlin", "10117", "Charitéplatz 1", "DE", "charite.de", "+49 30"),
    ("Deutsches Herzzentrum München", "Munich", "Bavaria", "80636", "Lazarettstraße 36", "DE", "dhm.mhn.de", "+49 89"),
    ("Universitätsklinikum Heidelberg", "Heidelberg", "Baden-Württemberg", "69120", "Im Neuenheimer Feld 672", "DE", "med.uni-heidelberg.de", "+49 6221"),
    ("Herzzentrum Leipzig", "Leipzig", "Saxony", "04289", "Strümpellstraße 39", "DE", "helios-gesundheit.de", "+49 341"),
    ("Karolinska University Hospital", "Stockholm", "Stockholm County", "171 76", "Eugeniavägen 3", "SE", "ki.se", "+46 8"),
    ("Sahlgrenska University Hospital", "Gothenburg", "Västra Götaland", "413 45", "Blå stråket 5", "SE", "vgregion.se", "+46 31"),
    ("Rigshospitalet", "Copenhagen", "Capital Region", "2100", "Blegdamsvej 9", "DK", "regionh.dk", "+45 35"),
    ("Hôpital Européen Georges-Pompidou", "Paris", "Île-de-France", "75015", "20 Rue Leblanc", "FR", "aphp.fr", "+33 1"),
    ("Hôpital de la Pitié-Salpêtrière", "Paris", "Île-de-France", "75013", "47-83 Boulevard de l'Hôpital", "FR", "aphp.fr", "+33 1"),
    ("Hospices Civils de Lyon", "Lyon", "Auvergne-Rhône-Alpes", "69002", "3 Quai des Célestins", "FR", "chu-lyon.fr", "+33 4"),
    ("Ospedale San Raffaele", "Milan", "Lombardy", "20132", "Via Olgettina 60", "IT", "hsr.it", "+39 02"),
    ("Policlinico Universitario Agostino Gemelli", "Rome", "Lazio", "00168", "Largo Agostino Gemelli 8", "IT", "policlinicogemelli.it", "+39 06"),
    ("Hospital Clínic de Barcelona", "Barcelona", "Catalonia", "08036", "Carrer de Villarroel 170", "ES", "clinic.cat", "+34 93"),
    ("Hospital Universitario La Paz", "Madrid", "Community of Madrid", "28046", "Paseo de la Castellana 261", "ES", "salud.madrid.org", "+34 91"),
    ("Erasmus MC", "Rotterdam", "South Holland", "3015 GD", "Doctor Molewaterplein 40", "NL", "erasmusmc.nl", "+31 10"),
    ("Amsterdam UMC", "Amsterdam", "North Holland", "1105 AZ", "Meibergdreef 9", "NL", "amsterdamumc.nl", "+31 20"),
    ("UZ Leuven", "Leuven", "Flemish Brabant", "3000", "Herestraat 49", "BE", "uzleuven.be", "+32 16"),
    ("Universitätsspital Zürich", "Zurich", "Zurich", "8091", "Rämistrasse 100", "CH", "usz.ch", "+41 44"),
    ("Inselspital Bern", "Bern", "Bern", "3010", "Freiburgstrasse 18", "CH", "insel.ch", "+41 31"),
    ("Allgemeines Krankenhaus Wien", "Vienna", "Vienna", "1090", "Währinger Gürtel 18-20", "AT", "meduniwien.ac.at", "+43 1"),
    ("Royal Brompton Hospital", "London", "England", "SW3 6NP", "Sydney Street", "GB", "rbht.nhs.uk", "+44 20"),
    ("St Thomas' Hospital", "London", "England", "SE1 7EH", "Westminster Bridge Rd", "GB", "gstt.nhs.uk", "+44 20"),
    ("John Radcliffe Hospital", "Oxford", "England", "OX3 9DU", "Headley Way", "GB", "ouh.nhs.uk", "+44 1865"),
    ("Peking Union Medical College Hospital", "Beijing", "Beijing", "100730", "1 Shuaifuyuan Wangfujing", "CN", "pumch.cn", "+86 10"),
    ("Fuwai Hospital", "Beijing", "Beijing", "100037", "167 Beilishi Rd", "CN", "fuwaihospital.org", "+86 10"),
    ("Zhongshan Hospital, Fudan University", "Shanghai", "Shanghai", "200032", "180 Fenglin Rd", "CN", "zs-hospital.sh.cn", "+86 21"),
    ("West China Hospital", "Chengdu", "Sichuan", "610041", "37 Guoxue Alley", "CN", "wchscu.cn", "+86 28"),
    ("The University of Tokyo Hospital", "Tokyo", "Tokyo", "113-8655", "7-3-1 Hongo", "JP", "h.u-tokyo.ac.jp", "+81 3"),
    ("Osaka University Hospital", "Suita", "Osaka", "565-0871", "2-15 Yamadaoka", "JP", "hosp.med.osaka-u.ac.jp", "+81 6"),
    ("National Cerebral and Cardiovascular Center", "Suita", "Osaka", "564-8565", "6-1 Kishibe-Shimmachi", "JP", "ncvc.go.jp", "+81 6"),
    ("Keio University Hospital", "Tokyo", "Tokyo", "160-8582", "35 Shinanomachi", "JP", "keio.jp", "+81 3"),
    ("All India Institute of Medical Sciences", "New Delhi", "Delhi", "110029", "Ansari Nagar", "IN", "aiims.edu", "+91 11"),
    ("Christian Medical College Vellore", "Vellore", "Tamil Nadu", "632004", "Ida Scudder Rd", "IN", "cmcvellore.ac.in", "+91 416"),
    ("Apollo Hospitals Chennai", "Chennai", "Tamil Nadu", "600006", "21 Greams Lane", "IN", "apollohospitals.com", "+91 44"),
    ("Narayana Health City", "Bengaluru", "Karnataka", "560099", "258/A Bommasandra", "IN", "narayanahealth.org", "+91 80"),
    ("Seoul National University Hospital", "Seoul", "Seoul", "03080", "101 Daehak-ro", "KR", "snuh.org", "+82 2"),
    ("Asan Medical Center", "Seoul", "Seoul", "05505", "88 Olympic-ro 43-gil", "KR", "amc.seoul.kr", "+82 2"),
    ("Royal Melbourne Hospital", "Melbourne", "Victoria", "3050", "300 Grattan St", "AU", "mh.org.au", "+61 3"),
    ("Royal Prince Alfred Hospital", "Sydney", "New South Wales", "2050", "50 Missenden Rd", "AU", "health.nsw.gov.au", "+61 2"),
    ("Hospital Israelita Albert Einstein", "São Paulo", "São Paulo", "05652-900", "Av. Albert Einstein 627", "BR", "einstein.br", "+55 11"),
)

# specialty token -> departments, expertise areas, research interests, title words
SPECIALTIES = {
    "interventional_cardiology": (
        ("Interventional Cardiology", "Cardiovascular Medicine", "Cardiac Catheterization Laboratory"),
        ("complex PCI", "chronic total occlusion", "left main stenting", "intravascular imaging", "bifurcation lesions"),
        ("drug-eluting stent outcomes", "bioresorbable scaffolds", "physiology-guided PCI", "stent thrombosis"),
        "Interventional Cardiologist",
    ),
    "structural_heart": (
        ("Structural Heart Program", "Heart Valve Center", "Cardiovascular Medicine"),
        ("TAVR", "mitral transcatheter edge-to-edge repair", "left atrial appendage occlusion", "valve-in-valve"),
        ("TAVR durability", "conduction disturbances after TAVR", "transcatheter tricuspid therapies"),
        "Structural Heart Specialist",
    ),
    "electrophysiology": (
        ("Cardiac Electrophysiology", "Arrhythmia Service", "Heart Rhythm Center"),
        ("atrial fibrillation ablation", "pulsed field ablation", "leadless pacing", "ICD therapy", "cardiac mapping"),
        ("pulsed field ablation safety", "conduction system pacing", "remote device monitoring"),
        "Electrophysiologist",
    ),
    "cardiac_surgery": (
        ("Cardiac Surgery", "Cardiothoracic Surgery", "Heart Surgery"),
        ("minimally invasive valve surgery", "aortic surgery", "CABG", "surgical ablation"),
        ("sutureless valves", "hybrid revascularization", "aortic root repair"),
        "Cardiac Surgeon",
    ),
    "heart_failure": (
        ("Heart Failure Program", "Advanced Heart Failure", "Cardiology"),
        ("LVAD therapy", "cardiac resynchronization", "hemodynamic monitoring", "cardio-oncology"),
        ("implantable hemodynamic sensors", "device-based HF therapy", "remote patient management"),
        "Heart Failure Cardiologist",
    ),
    "vascular_surgery": (
        ("Vascular Surgery", "Vascular and Endovascular Surgery"),
        ("EVAR", "TEVAR", "peripheral arterial disease", "carotid stenting", "critical limb ischemia"),
        ("drug-coated balloons", "endoleak management", "below-the-knee interventions"),
        "Vascular Surgeon",
    ),
    "endocrinology": (
        ("Endocrinology, Diabetes and Metabolism", "Diabetes Center", "Endocrinology"),
        ("type 1 diabetes", "insulin pump therapy", "continuous glucose monitoring", "automated insulin delivery"),
        ("closed-loop systems", "CGM time in range", "diabetes technology in pregnancy"),
        "Endocrinologist",
    ),
    "orthopedic_surgery": (
        ("Orthopaedic Surgery", "Joint Replacement Center", "Orthopedics"),
        ("total knee arthroplasty", "total hip arthroplasty", "robotic-assisted arthroplasty", "revision arthroplasty"),
        ("implant survivorship", "cementless fixation", "outpatient arthroplasty"),
        "Orthopaedic Surgeon",
    ),
    "spine_surgery": (
        ("Spine Center", "Orthopaedic Spine Surgery", "Neurosurgery"),
        ("lumbar fusion", "minimally invasive spine surgery", "cervical disc arthroplasty", "spinal navigation"),
        ("interbody cage materials", "adjacent segment disease", "enabling technologies in spine"),
        "Spine Surgeon",
    ),
    "neurosurgery": (
        ("Neurosurgery", "Functional Neurosurgery", "Neurological Surgery"),
        ("deep brain stimulation", "spinal cord stimulation", "neurovascular intervention", "epilepsy surgery"),
        ("closed-loop neuromodulation", "directional DBS leads", "flow diverters"),
        "Neurosurgeon",
    ),
    "neurology": (
        ("Neurology", "Movement Disorders Center", "Stroke Center"),
        ("Parkinson's disease", "acute stroke", "essential tremor", "epilepsy"),
        ("adaptive DBS", "mechanical thrombectomy outcomes", "neurostimulation programming"),
        "Neurologist",
    ),
    "pulmonology": (
        ("Pulmonary Medicine", "Interventional Pulmonology"),
        ("bronchoscopic lung volume reduction", "navigational bronchoscopy", "sleep apnea"),
        ("robotic bronchoscopy", "endobronchial valves", "hypoglossal nerve stimulation"),
        "Pulmonologist",
    ),
    "nephrology": (
        ("Nephrology", "Kidney Center"),
        ("hemodialysis access", "peritoneal dialysis", "renal denervation"),
        ("renal denervation for hypertension", "home dialysis technology"),
        "Nephrologist",
    ),
    "radiology": (
        ("Interventional Radiology", "Radiology"),
        ("embolization", "peripheral interventions", "image-guided therapy"),
        ("genicular artery embolization", "photon-counting CT", "AI in imaging"),
        "Interventional Radiologist",
    ),
}

ACADEMIC_TITLES = (
    ("Professor of Medicine", 6), ("Associate Professor", 5), ("Assistant Professor", 4),
    ("Chief of {dept}", 3), ("Director, {dept}", 3), ("Consultant {role}", 5), ("Attending {role}", 5),
    ("Senior Lecturer", 2), ("Head of {dept}", 2), ("{role}", 6),
)

TAGS = (
    "advisory_board", "speaker_bureau", "clinical_investigator", "key_account", "congress_faculty",
    "digital_opinion_leader", "early_adopter", "guideline_author", "proctor", "training_center",
)

NOTES = (
    "Prefers contact through the hospital's scientific office.",
    "Interested in first-in-human data before committing to a trial.",
    "Met at the last national congress; follow up on training request.",
    "Do not contact during August; department closed for leave.",
    "Requested reprints of the pivotal trial publication.",
    "Potential principal investigator for the post-market registry.",
    "Sits on the hospital's value analysis committee.",
    "Asked for a demo of the new delivery system.",
)


# congress name, city, country
CONGRESSES = (
    ("TCT", "San Francisco", "US"), ("ESC Congress", "London", "GB"), ("EuroPCR", "Paris", "FR"),
    ("ACC Scientific Session", "Chicago", "US"), ("Heart Rhythm", "San Diego", "US"),
    ("EHRA Congress", "Berlin", "DE"), ("ADA Scientific Sessions", "Orlando", "US"),
    ("ATTD Conference", "Amsterdam", "NL"), ("EASD Annual Meeting", "Vienna", "AT"),
    ("AAOS Annual Meeting", "San Diego", "US"), ("EFORT Congress", "Lisbon", "PT"),
    ("CNS Annual Meeting", "Houston", "US"), ("NASS Annual Meeting", "Chicago", "US"),
    ("PCR London Valves", "London", "GB"), ("CIT China Interventional Therapeutics", "Beijing", "CN"),
    ("CVIT Japan", "Yokohama", "JP"), ("VIVA", "Las Vegas", "US"), ("LINC", "Leipzig", "DE"),
    ("CIRSE", "Barcelona", "ES"), ("India Live", "New Delhi", "IN"),
)
EVENT_TOPICS = (
    "TAVR durability", "pulsed field ablation", "complex PCI", "CGM-guided therapy", "robotic arthroplasty",
    "closed-loop neuromodulation", "drug-coated balloons", "left atrial appendage occlusion",
    "automated insulin delivery", "spinal navigation", "renal denervation", "leadless pacing",
)

CAMPAIGN_SUBJECTS = {
    "product_update": ("{{first_name}}, new clinical data for {product}", "Update: {product} labeling expansion",
                       "What's new in {product}"),
    "event_invitation": ("{{full_name}}, join us at {congress}", "Invitation: {topic} symposium",
                         "Save the date: {topic} workshop"),
    "new_product_launch": ("Introducing {product}", "{{first_name}}, meet the new {product}",
                           "{product} is now available in your region"),
    "newsletter": ("{topic}: this month's highlights", "Clinical evidence digest: {topic}",
                   "Your {{specialty}} newsletter"),
    "custom": ("A note for {{institution}}", "Follow-up from our meeting, {{first_name}}",
               "Your feedback on {topic}"),
}
FROM_NAMES = ("Medical Affairs", "Clinical Education Team", "Scientific Communications", "Global Marketing")

# product line name -> families: (family, category noun, specifications, features)
PRODUCT_LINES = {
    "Coronary Interventions": (
        ("Drug-Eluting Coronary Stent System", "drug-eluting stent",
         (("Strut thickness", "{n60} µm"), ("Drug", "Everolimus"), ("Diameters", "2.25-4.00 mm"))),
        ("Coronary Balloon Dilatation Catheter", "PTCA balloon",
         (("Crossing profile", "0.0{n16} in"), ("Rated burst pressure", "{n14} atm"))),
        ("Intravascular Ultrasound Imaging Catheter", "IVUS catheter",
         (("Frequency", "{n40} MHz"), ("Pullback speed", "{n1} mm/s"))),
    ),
    "Structural Heart": (
        ("Transcatheter Aortic Valve (TAVR) System", "TAVR valve",
         (("Valve sizes", "23, 26, 29 mm"), ("Delivery sheath", "{n14} Fr"))),
        ("Transcatheter Mitral Repair System", "mitral repair device",
         (("Clip widths", "4 and 6 mm"), ("Steerable guide", "24 Fr"))),
        ("Left Atrial Appendage Closure Device", "LAAO device",
         (("Device sizes", "20-35 mm"), ("Access sheath", "{n14} Fr"))),
    ),
    "Cardiac Rhythm Management": (
        ("Leadless Pacemaker", "leadless pacemaker", (("Volume", "{n1} cc"), ("Battery longevity", "{n10} years"))),
        ("Implantable Cardioverter-Defibrillator", "ICD", (("Max energy", "{n40} J"), ("MRI conditional", "Yes"))),
        ("Pulsed Field Ablation Catheter", "PFA catheter",
         (("Electrode array", "{n8}-spline"), ("Shaft size", "{n10} Fr"))),
    ),
    "Diabetes Care": (
        ("Insulin Pump", "insulin pump", (("Reservoir", "{n200} units"), ("Basal increment", "0.0{n1} U/h"))),
        ("Continuous Glucose Monitoring (CGM) System", "CGM",
         (("Sensor wear", "{n10} days"), ("MARD", "{n8}.{n1}%"))),
        ("Automated Insulin Delivery Algorithm", "AID system",
         (("Target range", "100-120 mg/dL"), ("Compatible pumps", "{n1}"))),
    ),
    "Neuromodulation": (
        ("Deep Brain Stimulation System", "DBS system",
         (("Lead contacts", "{n8} directional"), ("Battery", "Rechargeable"))),
        ("Spinal Cord Stimulator", "spinal cord stimulator",
         (("Frequency range", "2-{n1000} Hz"), ("MRI conditional", "Full body"))),
    ),
    "Orthopedics": (
        ("Total Knee Replacement System", "knee implant",
         (("Bearing", "Highly cross-linked polyethylene"), ("Sizes", "{n8} femoral"))),
        ("Cementless Hip Stem", "hip stem", (("Material", "Titanium alloy"), ("Coating", "Hydroxyapatite"))),
        ("Lumbar Interbody Fusion Cage", "interbody cage",
         (("Material", "3D-printed titanium"), ("Lordosis", "{n8}°"))),
    ),
    "Peripheral Vascular": (
        ("Drug-Coated Balloon", "drug-coated balloon", (("Drug", "Paclitaxel"), ("Lengths", "40-{n200} mm"))),
        ("Abdominal Aortic Stent Graft", "EVAR stent graft",
         (("Delivery profile", "{n14} Fr"), ("Neck length", "≥{n10} mm"))),
    ),
}
BRAND_STEMS = (
    "Aurex", "Corvia", "Valtra", "Syneo", "Lumira", "Cardeon", "Nexava", "Orbis", "Veltro", "Axiom",
    "Solva", "Trilux", "Endura", "Glycia", "Neurova", "Ostara", "Pulsar", "Helix", "Zenith", "Arcus",
    "Meridia", "Tessa", "Quanta", "Vireo", "Kinetra", "Elara", "Fidelis", "Stratos", "Omnia", "Ventra",
)
COMPANIES = (
    "Meridian MedTech", "Halcyon Devices", "Northbridge Cardio", "Apex Vascular", "Lumen Biosystems",
    "Solstice Diabetes", "Cortexa Neuro", "Ironwood Orthopedics", "Bluepeak Medical", "Vantage Cardiac",
)
FEATURES = (
    "MRI conditional labeling", "Low crossing profile", "Bluetooth remote monitoring", "Single-operator workflow",
    "Repositionable deployment", "Smartphone app integration", "Extended battery longevity",
    "Radiopaque markers", "Hydrophilic coating", "Factory-calibrated sensor", "Cloud data platform",
    "Reduced procedure time", "Compatible with 6 Fr guide catheters", "Closed-loop therapy adjustment",
)

# key -> name, country, region, url base
SIGNAL_SOURCES = {
    "fda": ("U.S. Food and Drug Administration", "US", "North America", "https://www.fda.gov/medical-devices/"),
    "ema": ("European Medicines Agency", "NL", "Europe", "https://www.ema.europa.eu/en/news/"),
    "nmpa": ("National Medical Products Administration", "CN", "Asia Pacific", "https://english.nmpa.gov.cn/"),
    "pmda": ("Pharmaceuticals and Medical Devices Agency", "JP", "Asia Pacific", "https://www.pmda.go.jp/english/"),
    "tga": ("Therapeutic Goods Administration", "AU", "Asia Pacific", "https://www.tga.gov.au/news/"),
    "health_canada": ("Health Canada", "CA", "North America", "https://recalls-rappels.canada.ca/en/"),
    "mhra": ("Medicines and Healthcare products Regulatory Agency", "GB", "Europe",
             "https://www.gov.uk/government/news/"),
    "industry": ("MedTech Industry News", "US", "Global", "https://news.medtech.example/"),
}
SIGNAL_TITLES = {
    "fda": ("FDA clears 510(k) for {company} {category}", "Class I recall: {company} {category} due to {issue}",
            "FDA issues safety communication on {category} {issue}", "FDA approves PMA supplement for {product}",
            "FDA grants Breakthrough Device designation to {company} {category}"),
    "ema": ("MDCG publishes guidance on clinical evaluation of {category} under the MDR",
            "EU MDR transition: notified body capacity update affects {category} certificates",
            "EMA consultation on companion diagnostics linked to {category}"),
    "nmpa": ("NMPA approves innovative {category} through priority review",
             "NMPA volume-based procurement round includes {category}",
             "NMPA updates registration requirements for imported {category}"),
    "pmda": ("PMDA approves {product} for the Japanese market", "MHLW sets reimbursement price for {category}",
             "PMDA safety notice on {category} {issue}"),
    "tga": ("TGA lists {company} {category} on the ARTG", "TGA recall action for {category} due to {issue}"),
    "health_canada": ("Health Canada issues Medical Device Licence for {product}",
                      "Health Canada recall: {company} {category} {issue}"),
    "mhra": ("MHRA field safety notice: {company} {category} {issue}",
             "MHRA extends acceptance of CE-marked {category} in Great Britain"),
    "industry": ("{company} reports late-breaking trial results for {category}",
                 "{company} acquires start-up developing next-generation {category}",
                 "Competitor launches {category} with {feature}", "Reimbursement update: new payment code for {category}"),
}
SIGNAL_ISSUES = (
    "battery depletion", "delivery system detachment", "sensor inaccuracy", "software anomaly",
    "packaging sterility breach", "balloon rupture", "labeling error", "connector corrosion",
)
IMPACT_CATEGORIES = (
    "regulatory", "safety", "competitive", "reimbursement", "clinical_evidence", "market_access", "supply_chain",
)
RELEVANCE_TYPES = ("direct", "competitor", "same_category", "indication")
